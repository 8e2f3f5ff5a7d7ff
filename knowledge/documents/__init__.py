"""Documents: uploads checked and stored once per content, their status machine (`status`), the
ingestion pipeline (`ingestion/`: runner, heartbeat, queue, tasks), re-analysis with a new
dictionary, bulk import and the index consistency check."""
