#!/bin/bash
# Published Megatron-LM performance recipe: Llama 3 8B, BF16, 8 x H200 (one node), with the loss and
# iteration-time curves it produced (examples/llama/assets/train_llama3_8b_h200_bf16_*.png).
# Source: NVIDIA/Megatron-LM examples/llama/train_llama3_8b_h200_bf16.sh at commit
# 0c0185b16dc7e98c9f2adfbf476fd52f58894644
# (https://github.com/NVIDIA/Megatron-LM/blob/0c0185b16dc7e98c9f2adfbf476fd52f58894644/examples/llama/train_llama3_8b_h200_bf16.sh).
# The script builds its command from bash arrays; this is the command it runs with its defaults
# (real-data branch, GPUS_PER_NODE=8, NUM_NODES=1), arrays expanded in the script's order, the
# commented-out options and inline comments dropped; site paths are shortened to $-placeholders.
export CUDA_DEVICE_MAX_CONNECTIONS=1
/bin/python -m torch.distributed.run \
    --nproc-per-node 8 --nnodes 1 --node-rank 0 --master-addr localhost --master-port 6000 \
    pretrain_gpt.py \
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
    --tensor-model-parallel-size 1 \
    --context-parallel-size 1 \
    --sequence-parallel \
    --data-path $DATA_ARG \
    --tokenizer-type HuggingFaceTokenizer \
    --tokenizer-model $TOKENIZER_ARG \
    --data-cache-path $DATA_CACHE_PATH \
    --split '99,1,0' \
    --no-create-attention-mask-in-dataloader \
    --no-mmap-bin-files \
    --num-workers 1 \
    --vocab-size 128256 \
    --log-interval 1 \
    --save-interval 1000 \
    --log-throughput \
    --profile \
    --profile-step-start 4 \
    --profile-step-end 6 \
    --ckpt-format torch_dist \
    --distributed-timeout-minutes 60 \
    --save $CHECKPOINT_PATH \
    --load $CHECKPOINT_PATH \
    --tensorboard-dir $TENSORBOARD_LOGS_PATH \
    --wandb-project megatron-lm-training \
    --wandb-exp-name llama3x-8b-bf16-tp1 \
    --wandb-save-dir $CHECKPOINT_PATH/wandb \
    --log-params-norm \
    --log-num-zeros-in-grad \
    --log-timers-to-tensorboard
