from django.urls import path

from . import views

urlpatterns = [
    path("chat/completions", views.chat_completions, name="openai-chat-completions"),
    path("models", views.ModelListView.as_view(), name="openai-models"),
    path("models/<str:model_id>", views.ModelDetailView.as_view(), name="openai-model"),
]
