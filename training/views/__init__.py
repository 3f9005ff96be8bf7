"""Language views of real captions at each granularity, and their typed hard negatives."""
