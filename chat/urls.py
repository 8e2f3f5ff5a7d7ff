from django.urls import path

from . import views
from .feedback import views as feedback_views

urlpatterns = [
    path("chat", views.ChatView.as_view(), name="chat"),
    path("chat/stream", views.chat_stream, name="chat-stream"),
    path("chat/conversations", views.ConversationListView.as_view(), name="chat-conversations"),
    path(
        "chat/conversations/<uuid:conversation_id>",
        views.ConversationDetailView.as_view(),
        name="chat-conversation",
    ),
    path("chat/messages/<str:message_id>/feedback", feedback_views.AnswerFeedbackView.as_view(), name="chat-feedback"),
]
