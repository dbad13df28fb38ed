"""vLLM on a GPU host over SSH: the connection, the host's side, the metadata shadow, the server."""
