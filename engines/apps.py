from django.apps import AppConfig


class EnginesConfig(AppConfig):
    """Ground floor: model and vector-store adapters that every app builds on.

    It imports no other app of the project; knowledge, retrieval and chat import it.
    """

    name = "engines"
    verbose_name = "Engines"
