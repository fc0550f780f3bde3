"""stram application master: plans the DAG, tracks containers, decides recovery."""
