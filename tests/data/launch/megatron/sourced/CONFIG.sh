# Written for primus's tests in the structure of Megatron-LM examples/academic_paper_scripts/sc21/CONFIG.sh:
# settings a run script sources. primus reads it in place; it is never run.
NNODES=2
MODEL_ARGS="--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --ffn-hidden-size 14336 \
    --group-query-attention --num-query-groups 8 --vocab-size 128256 --swiglu --normalization RMSNorm \
    --position-embedding-type rope --untie-embeddings-and-output-weights --disable-bias-linear \
    --hidden-dropout 0.0 --attention-dropout 0.0"
