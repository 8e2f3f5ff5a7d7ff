"""ASGI entry point: HTTP through Django (the MCP endpoint `/mcp/` in front of it when
RAG_MCP_ENABLED), WebSocket through Channels (daphne serves both)."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ragsite.settings.local")

# Django must be set up before anything imports models (consumers, routing).
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.conf import settings  # noqa: E402

from integrations.mcp.asgi import with_mcp  # noqa: E402
from ragsite.routing import websocket_urlpatterns  # noqa: E402
from retrieval.warmup import start_background_warm_up  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": with_mcp(django_asgi_app) if settings.RAG_MCP_ENABLED else django_asgi_app,
        "websocket": AllowedHostsOriginValidator(
            AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
        ),
    }
)

if settings.RAG_WARM_UP:
    start_background_warm_up()
