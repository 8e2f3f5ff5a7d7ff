from django.urls import path

from . import views

urlpatterns = [
    path("retrieval/search", views.SearchView.as_view(), name="retrieval-search"),
    path("retrieval/explain", views.ExplainView.as_view(), name="retrieval-explain"),
    path("assets/<int:asset_id>", views.AssetBytesView.as_view(), name="asset-bytes"),
    path("chunks/<int:chunk_id>/preview", views.ChunkPreviewView.as_view(), name="chunk-preview"),
]
