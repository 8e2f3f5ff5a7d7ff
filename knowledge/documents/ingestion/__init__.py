"""The ingestion pipeline: `runner` (the stage order of a batch), `heartbeat` (lease and
embedding progress), `announce` (live status events), `queue` (QUEUED and the stale sweep),
`tasks` (the background tasks and the retries they enqueue)."""
