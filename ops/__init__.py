"""What operators run beside the product: benchmarks (bench/) and deployment files (deploy/)."""
