"""A bare Flower app: FedAvg on Fashion-MNIST (benchmarks/peers.py)."""
