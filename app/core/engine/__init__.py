"""The llama.cpp engine: GGUF checks, the child-process host and its protocol."""
