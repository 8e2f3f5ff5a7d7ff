"""The item catalog of a knowledge base: products, models and services with every name people use
for them, and which chunks are about which item."""
