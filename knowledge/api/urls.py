from django.urls import path

from . import views

urlpatterns = [
    path("knowledge-bases/", views.KnowledgeBaseListView.as_view(), name="kb-list"),
    path("knowledge-bases/<str:kb_id>/", views.KnowledgeBaseDetailView.as_view(), name="kb-detail"),
    path("knowledge-bases/<str:kb_id>/reanalyse/", views.KnowledgeBaseReanalyseView.as_view(), name="kb-reanalyse"),
    path("knowledge-bases/<str:kb_id>/versions/", views.VersionListView.as_view(), name="version-list"),
    path("knowledge-bases/<str:kb_id>/versions/<int:number>/", views.VersionDetailView.as_view(), name="version-detail"),
    path("knowledge-bases/<str:kb_id>/versions/<int:number>/activate/", views.VersionActivateView.as_view(), name="version-activate"),
    path("knowledge-bases/<str:kb_id>/versions/<int:number>/rollback/", views.VersionRollbackView.as_view(), name="version-rollback"),
    path("knowledge-bases/<str:kb_id>/versions/<int:number>/mark-ready/", views.VersionMarkReadyView.as_view(), name="version-mark-ready"),
    path("knowledge-bases/<str:kb_id>/versions/<int:number>/retire/", views.VersionRetireView.as_view(), name="version-retire"),
    path("knowledge-bases/<str:kb_id>/activations/", views.ActivationListView.as_view(), name="activation-list"),
    path("knowledge-bases/<str:kb_id>/documents/", views.DocumentListView.as_view(), name="document-list"),
    path("knowledge-bases/<str:kb_id>/documents/<int:document_id>/", views.DocumentDetailView.as_view(), name="document-detail"),
    path("knowledge-bases/<str:kb_id>/documents/<int:document_id>/retry/", views.DocumentRetryView.as_view(), name="document-retry"),
    path("knowledge-bases/<str:kb_id>/faqs/", views.FAQListView.as_view(), name="faq-list"),
    path("knowledge-bases/<str:kb_id>/faqs/<int:faq_id>/", views.FAQDetailView.as_view(), name="faq-detail"),
    path("admin/cache/invalidate", views.CacheInvalidateView.as_view(), name="cache-invalidate"),
]
