#!/bin/bash
# Published Megatron-LM example: GPT-3 175B, TP 8 x PP 16, fp16.
# Source: NVIDIA/Megatron-LM examples/gpt3/train_gpt3_175b_distributed.sh at commit
# 157006d6d9bf4f55c0d4d7dacbd2b65e7bd84dc9
# (https://github.com/NVIDIA/Megatron-LM/blob/157006d6d9bf4f55c0d4d7dacbd2b65e7bd84dc9/examples/gpt3/train_gpt3_175b_distributed.sh).
# Written as in the script: bash arrays of arguments and a torchrun line that expands them. The
# script's NUM_NODES=1 is a placeholder ("Change for multinode config"): TP 8 x PP 16 needs 128 GPUs.

export CUDA_DEVICE_MAX_CONNECTIONS=1

GPUS_PER_NODE=8
MASTER_ADDR=localhost
MASTER_PORT=6000
NUM_NODES=1

torchrun --nproc_per_node $GPUS_PER_NODE --nnodes $NUM_NODES --master_addr $MASTER_ADDR --master_port $MASTER_PORT \
    examples/classes/pretrain_gpt.py \
    --num-layers 96 \
    --hidden-size 12288 \
    --num-attention-heads 96 \
    --seq-length 2048 \
    --max-position-embeddings 2048 \
    --attention-backend auto \
    --micro-batch-size 1 \
    --global-batch-size 1536 \
    --rampup-batch-size 16 16 5859375 \
    --train-iters 500000 \
    --weight-decay 0.1 \
    --adam-beta1 0.9 \
    --adam-beta2 0.95 \
    --init-method-std 0.006 \
    --clip-grad 1.0 \
    --fp16 \
    --lr 6.0e-5 \
    --lr-decay-style cosine \
    --min-lr 6.0e-6 \
    --lr-warmup-fraction .001 \
    --lr-decay-iters 430000 \
    --tensor-model-parallel-size 8 \
    --pipeline-model-parallel-size 16 \
    --data-path $DATA_PATH \
    --vocab-file $VOCAB_FILE \
    --merge-file $MERGE_FILE \
    --split 949,50,1 \
    --log-interval 100 \
    --save-interval 10000 \
    --eval-interval 1000 \
    --save $CHECKPOINT_PATH \
    --load $CHECKPOINT_PATH \
    --eval-iters 10 \
    --tensorboard-dir $TENSORBOARD_LOGS_PATH
