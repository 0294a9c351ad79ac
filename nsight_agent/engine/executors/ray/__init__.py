"""The Ray executor: a GPU pool on a Ray cluster, one GPU host actor per GPU."""
