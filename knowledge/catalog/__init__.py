"""Knowledge bases and their versions: creation, access settings, drafts, publishing, rollback,
retirement, the release gate and readiness (BUILDING → READY). The one owner of the version
state machine."""
