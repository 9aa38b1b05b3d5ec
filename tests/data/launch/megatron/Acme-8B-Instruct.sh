#!/bin/bash
# Written for primus's tests: the model definition that parallel_sizes_only.sh's checkpoint names, in the
# structure of Megatron-LM's modelopt conf files (a MODEL_ARGS string, no launch line).

TOKENIZER_MODEL=meta-llama/Llama-3.1-8B

MODEL_ARGS=" \
    --num-layers 32 \
    --hidden-size 4096 \
    --ffn-hidden-size 14336 \
    --num-attention-heads 32 \
    --group-query-attention \
    --num-query-groups 8 \
    --kv-channels 128 \
    --normalization RMSNorm \
    --swiglu \
    --disable-bias-linear \
    --untie-embeddings-and-output-weights \
    --position-embedding-type rope \
    --max-position-embeddings 131072 \
"
