#!/bin/bash
# Published Megatron-LM performance recipe: Llama 3 8B, FP8, 8 x H100 (one node).
# Source: NVIDIA/Megatron-LM examples/llama/train_llama3_8b_h100_fp8.sh at commit
# 157006d6d9bf4f55c0d4d7dacbd2b65e7bd84dc9
# (https://github.com/NVIDIA/Megatron-LM/blob/157006d6d9bf4f55c0d4d7dacbd2b65e7bd84dc9/examples/llama/train_llama3_8b_h100_fp8.sh).
# The script builds its command from bash arrays; this is the command it runs with its defaults
# (mock data, DTYPE=fp8, GPUS_PER_NODE=8, NUM_NODES=1), arrays expanded in the script's order
# (MODEL_ARGS, TRAINING_ARGS + DDP_ARGS, DTYPE_ARGS, MODEL_PARALLEL_ARGS, DATA_ARGS_LIST,
# EVAL_AND_LOGGING_ARGS), its inline comments dropped and ${PWD} left relative.
export CUDA_DEVICE_MAX_CONNECTIONS=1
torchrun --nproc_per_node 8 --nnodes 1 --node_rank 0 --master_addr localhost --master_port 6000 \
    examples/classes/pretrain_gpt.py \
    --use-mcore-models \
    --num-layers 32 \
    --hidden-size 4096 \
    --ffn-hidden-size 14336 \
    --num-attention-heads 32 \
    --group-query-attention \
    --num-query-groups 8 \
    --kv-channels 128 \
    --seq-length 8192 \
    --max-position-embeddings 8192 \
    --position-embedding-type rope \
    --rotary-base 1000000 \
    --rotary-percent 1.0 \
    --attention-dropout 0.0 \
    --hidden-dropout 0.0 \
    --swiglu \
    --init-method-std 0.0134 \
    --attention-backend fused \
    --apply-layernorm-1p \
    --untie-embeddings-and-output-weights \
    --disable-bias-linear \
    --micro-batch-size 1 \
    --global-batch-size 128 \
    --train-samples 1953125000 \
    --lr-decay-samples 1949218748 \
    --lr-warmup-samples 3906252 \
    --lr 0.00015 \
    --min-lr 0.00001 \
    --decoupled-lr 5.0e-4 \
    --decoupled-min-lr 4.5e-5 \
    --lr-decay-style cosine \
    --clip-grad 1.0 \
    --weight-decay 0.1 \
    --adam-beta1 0.9 \
    --adam-beta2 0.95 \
    --bf16 \
    --grad-reduce-in-bf16 \
    --cross-entropy-loss-fusion \
    --calculate-per-token-loss \
    --manual-gc \
    --empty-unused-memory-level 1 \
    --exit-duration-in-mins 235 \
    --use-distributed-optimizer \
    --overlap-grad-reduce \
    --overlap-param-gather \
    --fp8-format hybrid \
    --fp8-amax-history-len 1024 \
    --fp8-amax-compute-algo max \
    --fp8-param-gather \
    --tensor-model-parallel-size 1 \
    --context-parallel-size 1 \
    --sequence-parallel \
    --mock-data \
    --tokenizer-type NullTokenizer \
    --vocab-size 128256 \
    --data-cache-path ./benchmark_cache_llama3_8b_fp8 \
    --tiktoken-pattern v2 \
    --split 99,1,0 \
    --no-create-attention-mask-in-dataloader \
    --no-mmap-bin-files \
    --num-workers 1 \
    --log-interval 1 \
    --eval-iters 32 \
    --eval-interval 100 \
    --save-interval 1000 \
    --log-throughput \
    --profile \
    --profile-step-start 4 \
    --profile-step-end 6 \
    --ckpt-format torch_dist \
    --distributed-timeout-minutes 60 \
    --save checkpoints/llama3_8b_fp8 \
    --load checkpoints/llama3_8b_fp8 \
    --tensorboard-dir tensorboard_logs/llama3_8b_fp8
