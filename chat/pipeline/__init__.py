"""The answering pipeline (stages 0–7, listed in `rag`), one module per stage; `rag.RAGService` runs it."""
