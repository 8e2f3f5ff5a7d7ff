"""WebSocket routes. The chat consumer registers here when the chat app provides it."""

websocket_urlpatterns: list = []
