"""Signals other apps listen to; knowledge never needs to know who they are."""

from django.dispatch import Signal

# Sent after commit when a draft becomes READY (all its documents indexed): `version_id`.
# The release check (`evaluation.release`) evaluates the draft in the background.
version_ready = Signal()
