"""The answering pipeline (seed 003 stages 0–7), one module per stage; `rag.RAGService` runs it."""
