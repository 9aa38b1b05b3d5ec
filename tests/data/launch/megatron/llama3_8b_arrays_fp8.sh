#!/bin/bash
# Written for primus's tests in the structure of NVIDIA/Megatron-LM examples/llama/train_llama3_8b_h100_fp8.sh
# (d98e8a6): environment defaults, positional defaults, arithmetic, bash arrays appended to inside
# `if` blocks, a file test, a command substitution, and a `uv run` prefix. Not a copy of that file.

export CUDA_DEVICE_MAX_CONNECTIONS=${CUDA_DEVICE_MAX_CONNECTIONS:-1}

CHECKPOINT_PATH=${1:-"checkpoints/llama3_8b"}
TOKENIZER_ARG=${2:-"MOCK"}   # a tokenizer path, or "MOCK"
mkdir -p "$(dirname "$CHECKPOINT_PATH")"

GPUS_PER_NODE=8
NUM_NODES=2
MASTER_PORT=${MASTER_PORT:-29500}
WORLD_SIZE=$(($GPUS_PER_NODE*$NUM_NODES))
TP_SIZE=2
PP_SIZE=$((WORLD_SIZE / 8))
DTYPE="fp8"
SEQ_LENGTH=8192

DISTRIBUTED_ARGS=(
    --nproc_per_node $GPUS_PER_NODE
    --nnodes $NUM_NODES
    --master_port $MASTER_PORT
)

MODEL_ARGS=(
    --num-layers 32
    --hidden-size 4096
    --ffn-hidden-size 14336
    --num-attention-heads 32
    --group-query-attention --num-query-groups 8
    --kv-channels 128
    --seq-length $SEQ_LENGTH
    --max-position-embeddings $SEQ_LENGTH
    --position-embedding-type rope
    --attention-dropout 0.0
    --hidden-dropout 0.0
    --swiglu
    --normalization RMSNorm
    --untie-embeddings-and-output-weights
    --disable-bias-linear
)

TRAINING_ARGS=(
    --micro-batch-size 1
    --global-batch-size 128
    --lr 0.00015
    --bf16
)

DTYPE_ARGS=()
if [[ "$DTYPE" == "fp8" ]]; then
    DTYPE_ARGS+=(
        "--fp8-format hybrid"
        "--fp8-amax-history-len 1024"
    )
else
    DTYPE_ARGS+=("--fp8-format e4m3")
fi

MODEL_PARALLEL_ARGS=(
    --tensor-model-parallel-size $TP_SIZE
    # --context-parallel-size 2   (a comment inside an array)
    --pipeline-model-parallel-size ${PP_SIZE}
    --sequence-parallel
)
DDP_ARGS=(--use-distributed-optimizer --overlap-grad-reduce)
TRAINING_ARGS+=("${DDP_ARGS[@]}")

DATA_ARGS=()
if [[ "$TOKENIZER_ARG" == "MOCK" ]] || [[ -z "$TOKENIZER_ARG" ]]; then
    DATA_ARGS+=("--mock-data" "--tokenizer-type NullTokenizer" "--vocab-size 128256")
else
    DATA_ARGS+=("--tokenizer-model $TOKENIZER_ARG" "--vocab-size 32000")
fi

if [ ! -f "pretrain_gpt.py" ]; then
    echo "run this from the root of Megatron-LM"
    exit 1
fi

uv run python -m torch.distributed.run ${DISTRIBUTED_ARGS[@]} pretrain_gpt.py \
    ${MODEL_ARGS[@]} \
    ${TRAINING_ARGS[@]} \
    ${DTYPE_ARGS[@]} \
    ${MODEL_PARALLEL_ARGS[@]} \
    ${DATA_ARGS[@]} \
    --save "$CHECKPOINT_PATH"
