# Written for primus's tests in the structure of pytorch/torchtitan (after #2386) torchtitan/models/llama3/.
