#!/bin/bash
# Written for primus's tests in the structure of NVIDIA/Megatron-LM
# examples/post_training/modelopt/conf/meta-llama/*.sh (d98e8a6): a model definition in one quoted,
# continued string, with no launch line and no global batch size. Not a copy of that file.

if [ -z ${HF_MODEL_CKPT} ]; then
    HF_MODEL_CKPT=meta-llama/Llama-3.1-8B
    TOKENIZER_MODEL=meta-llama/Llama-3.1-8B
else
    TOKENIZER_MODEL=${HF_MODEL_CKPT}
fi

MODEL_ARGS=" \
    --micro-batch-size 1 \
    --bf16 \
    --disable-bias-linear \
    --untie-embeddings-and-output-weights \
    --use-rotary-position-embeddings \
    --normalization RMSNorm \
    --swiglu \
    --num-layers 32 \
    --hidden-size 4096 \
    --ffn-hidden-size 14336 \
    --num-attention-heads 32 \
    --group-query-attention \
    --num-query-groups 8 \
    --attention-dropout 0.0 \
    --hidden-dropout 0.0 \
    --seq-length 4096 \
    --max-position-embeddings 131072 \
    --vocab-size 128256 \
    --tokenizer-type HuggingFaceTokenizer \
    --rotary-base 500000 \
"
