"""RayDP pipelines: topics to Spark DataFrames and Ray Datasets and back, batch and streaming."""
