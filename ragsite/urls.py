from django.contrib import admin
from django.http import HttpResponsePermanentRedirect
from django.templatetags.static import static as static_url
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from chat import page as chat_page
from knowledge import views as knowledge_views
from retrieval import views as retrieval_views

from . import admin as site_admin  # noqa: F401  (re-registers users and groups: readable permission pickers)

urlpatterns = [
    path("", chat_page.chat_page, name="home"),
    # Browsers ask for /favicon.ico on every page, the admin included.
    path("favicon.ico", lambda request: HttpResponsePermanentRedirect(static_url("chat/favicon.svg")), name="favicon"),
    path("admin/knowledge/knowledgebase/<int:kb_pk>/hit-test/", retrieval_views.hit_test, name="hit-test"),
    path("admin/", admin.site.urls),
    path("i18n/", include("django.conf.urls.i18n")),
    path("api/", include("knowledge.api.urls")),
    path("api/", include("retrieval.urls")),
    path("api/", include("chat.urls")),
    path("v1/", include("integrations.openai.urls")),  # OpenAI-compatible chat completions and models
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("events/kb/<int:kb_id>/", knowledge_views.kb_events, name="kb-events"),
]

# MEDIA_ROOT is never served as it is, DEBUG included: originals and images leave only through
# permission-checked views (/api/assets/…, /api/chunks/…/preview, the admin's image view).

handler500 = "ragsite.views.server_error"
