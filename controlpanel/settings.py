"""Shardboard settings. Everything a deployment changes comes from the environment (README)."""

from __future__ import annotations

import socket
from pathlib import Path

import dj_database_url

from controlpanel import env

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env.env_str("SHARDBOARD_VAR_DIR", str(BASE_DIR / "var")))

DEBUG = env.env_bool("DEBUG", False)
SECRET_KEY = env.secret_key(VAR_DIR)
# Earlier keys, comma-separated: sessions and the audit chain's MACs made with them still verify.
SECRET_KEY_FALLBACKS = env.env_list("SECRET_KEY_FALLBACKS", "")
ALLOWED_HOSTS = env.env_list("ALLOWED_HOSTS", "127.0.0.1,localhost")
CSRF_TRUSTED_ORIGINS = env.env_list("CSRF_TRUSTED_ORIGINS", "")

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "ninja",  # its templates and bundled Swagger UI: the API docs page needs no CDN
    "controlpanel",
    "monitoring",
    "deployments",
    "playground",
    "benchmarks",
    "teams",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "controlpanel.middleware.RefuseNulMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "controlpanel.urls"
ASGI_APPLICATION = "controlpanel.asgi.application"

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
                "controlpanel.context.roles",
            ],
        },
    },
]

DATABASE_URL = env.database_url("DATABASE_URL", f"sqlite:///{VAR_DIR / 'shardboard.sqlite3'}")
DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=60)}
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    DATABASES["default"]["OPTIONS"] = {"timeout": 20, "transaction_mode": "IMMEDIATE"}
    DATABASES["default"]["CONN_MAX_AGE"] = 0
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = env.redis_url("REDIS_URL", "redis://127.0.0.1:6379/0")
# Sessions live in the database so that logging in works while Redis is down.
SESSION_ENGINE = "django.contrib.sessions.backends.db"
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": "shardboard",
        "OPTIONS": {"socket_connect_timeout": 0.5, "socket_timeout": 1.0},
    }
}
CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {
            # channels_redis blocks 5 s in BZPOPMIN; redis-py 8's default 5 s socket timeout would
            # end that read first and kill every idle consumer, so the read timeout is longer.
            # redis-py 8 caps a pool at 100 connections and raises past it: a reconnect storm of
            # a few hundred browsers (each joins a group on connect) needs more.
            "hosts": [
                {
                    "address": REDIS_URL,
                    "socket_timeout": 15,
                    "socket_connect_timeout": 2,
                    "max_connections": 2000,
                }
            ],
            "prefix": "shardboard.asgi",
            "capacity": 500,
        },
    }
}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "dashboard"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = env.env_str("TIME_ZONE", "UTC")
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "staticfiles"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # WhiteNoise warns when it is missing
WHITENOISE_USE_FINDERS = True  # serve static/ without a collectstatic step
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    # WhiteNoise serves a file's .gz beside it to clients that accept gzip: collectstatic
    # writes one for every file; static/vendor ships plotly's, since the server runs straight
    # from static/ (WHITENOISE_USE_FINDERS, no collectstatic step: so not the manifest storage).
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}

SESSION_COOKIE_HTTPONLY = True
# Behind HTTPS (a TLS-terminating proxy): cookies only over HTTPS.
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = env.env_bool("SHARDBOARD_SECURE_COOKIES", False)
LOGIN_FAILURE_LIMIT = env.env_int("LOGIN_FAILURE_LIMIT", 5, low=1, high=1000)
LOGIN_FAILURE_WINDOW_S = env.env_int("LOGIN_FAILURE_WINDOW_S", 900, low=1, high=86400)
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"

# Celery: JSON only, late acks, bounded task time; one queue per GPU host ("host.<name>").
CELERY_BROKER_URL = REDIS_URL
CELERY_RESULT_BACKEND = REDIS_URL
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_DEFAULT_QUEUE = "default"
CELERY_TASK_SOFT_TIME_LIMIT = env.env_int("CELERY_TASK_SOFT_TIME_LIMIT", 3300, low=10, high=86400)
CELERY_TASK_TIME_LIMIT = CELERY_TASK_SOFT_TIME_LIMIT + 60
CELERY_RESULT_EXPIRES = 3600
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# A host worker watches the engines it started: it must outlive any Redis outage, not exit
# after Celery's default of 100 reconnection attempts and leave them unwatched.
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 4 * 3600}
# The same Redis transport, guarded so a Redis outage during a task in hand does not end the
# host worker (controlpanel/brokertransport.py says why). Only for redis:// and rediss://.
if REDIS_URL.split("://", 1)[0] in ("redis", "rediss"):
    CELERY_BROKER_TRANSPORT = "controlpanel.brokertransport:Transport"

SHARDBOARD_HOST_NAME = env.env_str("SHARDBOARD_HOST_NAME", socket.gethostname())
SHARDBOARD_VLLM_BIN = env.env_str("SHARDBOARD_VLLM_BIN", "vllm")
SHARDBOARD_ENGINE_HOST = env.env_str("SHARDBOARD_ENGINE_HOST", "127.0.0.1")
SHARDBOARD_READY_TIMEOUT_S = env.env_float("SHARDBOARD_READY_TIMEOUT_S", 1800, low=5, high=86400)
SHARDBOARD_STOP_GRACE_S = env.env_float("SHARDBOARD_STOP_GRACE_S", 30, low=0.5, high=600)
# Before that SIGTERM: how long a stopping replica, already out of the gateway's rotation, is
# given to finish the streams it holds (deployments.live.drain); 0: no wait.
SHARDBOARD_DRAIN_GRACE_S = env.env_float("SHARDBOARD_DRAIN_GRACE_S", 60, low=0, high=3600)
# Idle deployments (deployments.host.idle): how often each host worker looks for them, and how
# long the gateway holds a request for a sleeping or scaled-to-zero one while it wakes or
# starts (then a 503 with Retry-After). A cold start of a large vLLM model takes minutes.
SHARDBOARD_IDLE_CHECK_S = env.env_float("SHARDBOARD_IDLE_CHECK_S", 10, low=0.1, high=3600)
SHARDBOARD_WAKE_HOLD_S = env.env_float("SHARDBOARD_WAKE_HOLD_S", 120, low=1, high=3600)
# The autoscaler's pace: one pass over every scaling policy (deployments.host.autoscaler).
SHARDBOARD_AUTOSCALE_TICK_S = env.env_float("SHARDBOARD_AUTOSCALE_TICK_S", 5, low=0.2, high=600)
SHARDBOARD_AUTO_RESTART = env.env_bool("SHARDBOARD_AUTO_RESTART", False)
# The planner's correction learned per (GPU model, vLLM version) from recorded starts
# (deployments.catalog.corrections); off: every plan is the planner's alone.
SHARDBOARD_PLANNER_CORRECTION = env.env_bool("SHARDBOARD_PLANNER_CORRECTION", True)
# A model over several hosts runs on a Ray cluster of its own (deployments.host.ray):
# `ray` must be the one of vLLM's environment (empty: the `ray` next to SHARDBOARD_VLLM_BIN);
# each node takes a block of ports from this range (open it between the hosts); the node
# advertises this host's address to the others (VLLM_HOST_IP, `ray start --node-ip-address`).
SHARDBOARD_RAY_BIN = env.env_str("SHARDBOARD_RAY_BIN", "")
SHARDBOARD_RAY_PORTS = env.env_str("SHARDBOARD_RAY_PORTS", "20000-20999")
SHARDBOARD_RAY_NODE_ADDRESS = env.env_str("SHARDBOARD_RAY_NODE_ADDRESS", "127.0.0.1")
SHARDBOARD_RAY_JOIN_TIMEOUT_S = env.env_float(
    "SHARDBOARD_RAY_JOIN_TIMEOUT_S", 120, low=5, high=3600
)
# `make run` sets it: Ctrl-C ends the engines too. Off, a worker leaves them serving and
# adopts them when it starts again (a GPU host's worker restarts without dropping requests).
SHARDBOARD_STOP_ENGINES_ON_EXIT = env.env_bool("SHARDBOARD_STOP_ENGINES_ON_EXIT", False)
# Work whose Celery message may be lost (Redis down at send, a worker killed holding it):
# the host worker's sweeper does pending launches, stops and due restarts of its own host
# itself once they are this old and no thread of it is on them.
SHARDBOARD_SWEEP_AFTER_S = env.env_float("SHARDBOARD_SWEEP_AFTER_S", 30, low=0.5, high=86400)
SHARDBOARD_SWEEP_INTERVAL_S = env.env_float("SHARDBOARD_SWEEP_INTERVAL_S", 5, low=0.2, high=3600)
# A running engine is probed on its /health; this many failures in a row is a hang, handled
# like a crash (failed, or restarted with auto-restart on).
SHARDBOARD_HEALTH_INTERVAL_S = env.env_float("SHARDBOARD_HEALTH_INTERVAL_S", 10, low=0.2, high=3600)
SHARDBOARD_HEALTH_TIMEOUT_S = env.env_float("SHARDBOARD_HEALTH_TIMEOUT_S", 5, low=0.1, high=600)
SHARDBOARD_HEALTH_FAILURES = env.env_int("SHARDBOARD_HEALTH_FAILURES", 3, low=1, high=1000)
# Automatic restarts of an engine that died: 5 s, 10 s, 20 s ... capped, at most N in a row.
SHARDBOARD_RESTART_BACKOFF_S = env.env_float("SHARDBOARD_RESTART_BACKOFF_S", 5, low=0.1, high=3600)
SHARDBOARD_RESTART_BACKOFF_MAX_S = env.env_float(
    "SHARDBOARD_RESTART_BACKOFF_MAX_S", 300, low=0.1, high=86400
)
SHARDBOARD_RESTART_MAX_ATTEMPTS = env.env_int("SHARDBOARD_RESTART_MAX_ATTEMPTS", 5, low=1, high=100)
# The engines a host worker prepares in the background when missing (deployments.host.prepare:
# the project's scripts, in SHARDBOARD_ENGINE_SCRIPTS_DIR), each reported on the pages; an
# engine left out is only looked for. SHARDBOARD_LLAMA=skip leaves llama.cpp out. A launch
# waits at most SHARDBOARD_ENGINE_WAIT_S for an engine still being prepared.
SHARDBOARD_PREPARE_ENGINES = [
    e
    for e in env.env_list("SHARDBOARD_PREPARE_ENGINES", "transformers,vllm,llamacpp")
    if not (e == "llamacpp" and env.env_str("SHARDBOARD_LLAMA", "build") == "skip")
]
SHARDBOARD_ENGINE_SCRIPTS_DIR = Path(
    env.env_str("SHARDBOARD_ENGINE_SCRIPTS_DIR", str(BASE_DIR / "scripts"))
)
SHARDBOARD_ENGINE_WAIT_S = env.env_float("SHARDBOARD_ENGINE_WAIT_S", 3600, low=1, high=86400)
GPU_BACKEND = env.env_str("GPU_BACKEND", "auto")
# Which engine process groups belong to which deployment, for the sampler's memory attribution.
SHARDBOARD_ENGINE_PGIDS = "deployments.host.watchdog.active_engine_pgids"
SIMULATED_GPUS = env.env_str("SIMULATED_GPUS", "4xH100-80GB@nvlink")
# A vLLM deployment on simulated GPUs runs the real vLLM on the CPU (deployments.host.
# engine_control): the KV cache it takes from the host's RAM instead of the plan's GPU share.
SHARDBOARD_SIMULATED_KV_CACHE_BYTES = env.env_int(
    "SHARDBOARD_SIMULATED_KV_CACHE_BYTES", 256 << 20, low=1 << 20, high=1 << 40
)
SAMPLE_INTERVAL_S = env.env_float("SAMPLE_INTERVAL_S", 1.0, low=0.2, high=60)
# The host's own CPU and RAM as a device beside its GPUs (vLLM's CPU build plans and runs on
# it; monitoring.gpus.cpu samples it). Off: the host offers its GPUs only.
SHARDBOARD_CPU_DEVICE = env.env_bool("SHARDBOARD_CPU_DEVICE", True)
HEARTBEAT_STALE_S = env.env_float("HEARTBEAT_STALE_S", 30, low=2, high=3600)
METRICS_TOKEN = env.env_str("METRICS_TOKEN", "")
HF_TOKEN = env.env_str("HF_TOKEN", "")
HF_ENDPOINT = env.env_str("HF_ENDPOINT", "")
HUB_TIMEOUT_S = env.env_float("HUB_TIMEOUT_S", 10, low=0.5, high=300)
HF_CACHE_TTL_S = env.env_int("HF_CACHE_TTL_S", 3600, low=0, high=30 * 86400)
# Host workers download Hub weights before an engine starts (off: the engine downloads them
# itself, as before) and refuse a download that would leave less than MIN_FREE on the Hub
# cache's disk; they rescan the cache this often.
SHARDBOARD_FETCH_WEIGHTS = env.env_bool("SHARDBOARD_FETCH_WEIGHTS", True)
SHARDBOARD_DOWNLOAD_MIN_FREE_BYTES = env.env_int(
    "SHARDBOARD_DOWNLOAD_MIN_FREE_BYTES", 2 << 30, low=0, high=1 << 50
)
SHARDBOARD_CACHE_SCAN_INTERVAL_S = env.env_float(
    "SHARDBOARD_CACHE_SCAN_INTERVAL_S", 60, low=1, high=86400
)
MODEL_ROOTS = [Path(p) for p in env.env_list("MODEL_ROOTS", str(VAR_DIR / "models"))]
AUDIT_PROMPTS = env.env_bool("AUDIT_PROMPTS", False)
# A copy of each new audit row to syslog: "/dev/log" or "host:port" (UDP); "" = none.
AUDIT_SYSLOG_ADDRESS = env.env_str("AUDIT_SYSLOG_ADDRESS", "")
PLAYGROUND_MAX_TOKENS = env.env_int("PLAYGROUND_MAX_TOKENS", 4096, low=1, high=1_000_000)
PLAYGROUND_MAX_CONCURRENT = env.env_int("PLAYGROUND_MAX_CONCURRENT", 4, low=1, high=1000)
# The most concurrent /v1/ requests a token's owner may give it (ApiToken.max_concurrent): an
# application or eval harness behind one token needs more than a person's browser.
PLAYGROUND_TOKEN_MAX_CONCURRENT_CEILING = env.env_int(
    "PLAYGROUND_TOKEN_MAX_CONCURRENT_CEILING", 64, low=1, high=10_000
)
# A /v1/ body past this is answered 413 before it is read (Content-Length) or as soon as it
# passes the limit (chunked): a long prompt is a few hundred KiB, images inline a few MiB.
PLAYGROUND_MAX_BODY_BYTES = env.env_int(
    "PLAYGROUND_MAX_BODY_BYTES", 4 * 1024 * 1024, low=1024, high=1024 * 1024 * 1024
)
# Prefix-affinity routing over a name's replicas (playground.gateway.routing): c of the load
# bound, a replica taking at most c times the mean in flight; 0: least loaded only.
PLAYGROUND_ROUTING_LOAD_FACTOR = env.env_float(
    "PLAYGROUND_ROUTING_LOAD_FACTOR", 1.25, low=0, high=100
)
# Choices per request (`n`, `best_of`): each is a whole generation on the engine.
PLAYGROUND_MAX_CHOICES = env.env_int("PLAYGROUND_MAX_CHOICES", 8, low=1, high=128)
# How often each host worker checks the teams' monthly GPU-hours against their running
# deployments (teams.host.tasks); 0: never.
SHARDBOARD_QUOTA_CHECK_S = env.env_float("SHARDBOARD_QUOTA_CHECK_S", 60, low=0, high=86400)
# Rate limits on /v1/, counted in Redis for every web process (playground.gateway.ratelimit);
# 0: no limit. Minutes and days are UTC windows.
GATEWAY_RPM_PER_TOKEN = env.env_int("GATEWAY_RPM_PER_TOKEN", 0, low=0, high=10_000_000)
GATEWAY_RPM_PER_USER = env.env_int("GATEWAY_RPM_PER_USER", 0, low=0, high=10_000_000)
GATEWAY_TOKENS_PER_DAY_PER_TOKEN = env.env_int(
    "GATEWAY_TOKENS_PER_DAY_PER_TOKEN", 0, low=0, high=10**12
)
GATEWAY_TOKENS_PER_DAY_PER_USER = env.env_int(
    "GATEWAY_TOKENS_PER_DAY_PER_USER", 0, low=0, high=10**12
)
PLAYGROUND_CONNECT_TIMEOUT_S = env.env_float("PLAYGROUND_CONNECT_TIMEOUT_S", 3, low=0.1, high=60)
PLAYGROUND_READ_TIMEOUT_S = env.env_float("PLAYGROUND_READ_TIMEOUT_S", 120, low=1, high=3600)
PLAYGROUND_STREAM_MAX_S = env.env_float("PLAYGROUND_STREAM_MAX_S", 900, low=1, high=86400)
# How long a web process may keep answering from memory that a token is valid and a deployment
# running: the bound within which a revocation or a stop takes effect everywhere (0 = no cache).
PLAYGROUND_AUTH_CACHE_S = env.env_float("PLAYGROUND_AUTH_CACHE_S", 2, low=0, high=60)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env.env_str("LOG_LEVEL", "INFO")},
    "loggers": {"daphne": {"level": "WARNING"}, "django.channels.server": {"level": "WARNING"}},
}

if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    # A file, not memory, so that worker and server processes started by tests share it.
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / "test.sqlite3")}
