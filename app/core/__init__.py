"""The Qt-free core: documents, tokens, strategies, the llama.cpp engine host and jobs."""
