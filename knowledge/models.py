"""Knowledge facts: bases, versions, documents, chunks, assets, FAQs and cache namespaces.

Invariants kept by the database, not only by code:
- at most one ACTIVE version and at most one BUILDING (draft) version per knowledge base;
- version numbers are unique per knowledge base;
- identical bytes are stored once per knowledge base (sha256).
A version is a *set of documents*: chunks and vectors belong to documents and are shared by every
version that contains them, never copied.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.models import Group
from django.core.validators import MinValueValidator, RegexValidator
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from engines.analysis import parse_terms

from knowledge.links import parse_link_hosts, validate_link_hosts

slug_validator = RegexValidator(
    r"^[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?$",
    _("只能包含小写字母、数字和连字符，且不能以连字符开头或结尾。"),
)


class Visibility(models.TextChoices):
    PUBLIC = "public", _("公开")
    INTERNAL = "internal", _("内部（登录用户）")
    RESTRICTED = "restricted", _("受限（指定用户组）")


class KnowledgeBase(models.Model):
    slug = models.SlugField(
        _("标识"), max_length=64, unique=True, validators=[slug_validator],
        help_text=_("API 与链接中使用的唯一标识，例如 employee-handbook。"),
    )
    name = models.CharField(_("名称"), max_length=200)
    description = models.TextField(_("描述"), blank=True)
    # The embedding space is fixed at creation: vectors of different models or dimensions are
    # not comparable, so ingestion refuses to mix them.
    embedding_model = models.CharField(_("向量模型"), max_length=100, editable=False)
    embedding_dimension = models.PositiveIntegerField(_("向量维度"), editable=False)
    # Fixed at creation too: chunks indexed under one analysis are not found by queries analysed
    # by another. Knowledge bases created before "terms-v1" keep Milvus's jieba ("jieba").
    text_analysis = models.CharField(_("文本分析"), max_length=32, editable=False, default="terms-v1")
    custom_terms = models.TextField(
        _("领域词典"), blank=True,
        help_text=_("每行一个词（产品名、型号、术语等），检索时作为整词匹配。修改后对新的提问立即生效，"
                    "对已有文档需执行“按词典重建索引”。"),
    )
    chunk_size_tokens = models.PositiveIntegerField(
        _("子块大小（词元数）"), default=512, validators=[MinValueValidator(64)]
    )
    chunk_overlap_tokens = models.PositiveIntegerField(_("子块重叠（词元数）"), default=48)
    visibility = models.CharField(
        _("可见范围"), max_length=16, choices=Visibility.choices, default=Visibility.INTERNAL
    )
    allowed_groups = models.ManyToManyField(
        Group, verbose_name=_("允许的用户组"), blank=True, related_name="knowledge_bases"
    )
    # Roles per knowledge base, separate from "is staff": editors prepare drafts (documents,
    # FAQs, dictionary), publishers also put versions live, roll back, retire and purge.
    editor_groups = models.ManyToManyField(
        Group, verbose_name=_("编辑者用户组"), blank=True, related_name="edited_knowledge_bases",
        help_text=_("可上传文档、维护 FAQ、准备草稿版本，并查看草稿、处理进度与问答记录。"),
    )
    publisher_groups = models.ManyToManyField(
        Group, verbose_name=_("发布者用户组"), blank=True, related_name="published_knowledge_bases",
        help_text=_("拥有编辑者的全部权限，并可发布、回滚、退役版本，修改访问控制，删除知识库。"),
    )
    support_contact = models.CharField(
        _("人工支持联系方式"), max_length=200, blank=True,
        help_text=_("知识库无法回答时提示用户联系的人或渠道。"),
    )
    # Links in answers (from documents, FAQs, the models quoting them) are shown as text with
    # their whole address; only these hosts' links stay clickable (knowledge/links.py).
    link_allowed_hosts = models.TextField(
        _("可点击链接的域名"), blank=True, default="", validators=[validate_link_hosts],
        help_text=_("回答中来自文档的链接默认只显示为文字（完整地址可见）、不可点击；只有这里列出的域名的链接"
                    "保持可点击。每行一个域名，如 docs.example.com；*.example.com 表示其下所有子域名。"),
    )
    # Web results join a question's candidates only where staff switched it on: they are cited as
    # web sources, never as the knowledge base's own text.
    web_search_enabled = models.BooleanField(
        _("启用网络搜索"), default=False,
        help_text=_("开启后，问答会同时检索互联网（需在部署中配置搜索服务），网页结果标注为“网络来源”，与知识库内容分开显示。"),
    )
    release_max_regression_points = models.FloatField(
        _("上线检查：允许的最大退步（百分点）"), null=True, blank=True,
        validators=[MinValueValidator(0.0)],
        help_text=_("草稿就绪后会用默认评测集检查；任一指标比生效版本低出此值即拒绝发布（可由管理员填写原因后强制发布）。"
                    "留空表示只展示检查结果，不拦截。"),
    )
    active_version = models.ForeignKey(
        "KnowledgeBaseVersion", verbose_name=_("当前生效版本"), null=True, blank=True,
        on_delete=models.PROTECT, related_name="+", editable=False,
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, verbose_name=_("创建人"), null=True, blank=True,
        on_delete=models.SET_NULL, related_name="+",
    )
    created_at = models.DateTimeField(_("创建时间"), auto_now_add=True)
    updated_at = models.DateTimeField(_("更新时间"), auto_now=True)

    class Meta:
        verbose_name = _("知识库")
        verbose_name_plural = _("知识库")
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.slug})"

    @property
    def dictionary_terms(self) -> tuple[str, ...]:
        return parse_terms(self.custom_terms)

    @property
    def link_hosts(self) -> tuple[str, ...]:
        """The allow list as it is matched (knowledge/links.py)."""
        return parse_link_hosts(self.link_allowed_hosts)


class VersionStatus(models.TextChoices):
    BUILDING = "building", _("构建中")
    READY = "ready", _("就绪")
    ACTIVE = "active", _("生效中")
    RETIRED = "retired", _("已退役")
    FAILED = "failed", _("失败")


class KnowledgeBaseVersion(models.Model):
    knowledge_base = models.ForeignKey(
        KnowledgeBase, verbose_name=_("知识库"), on_delete=models.CASCADE, related_name="versions"
    )
    number = models.PositiveIntegerField(_("版本号"))
    label = models.CharField(_("标签"), max_length=100, blank=True)
    notes = models.TextField(_("说明"), blank=True)
    status = models.CharField(
        _("状态"), max_length=16, choices=VersionStatus.choices, default=VersionStatus.BUILDING
    )
    documents = models.ManyToManyField(
        "Document", verbose_name=_("文档"), blank=True, related_name="versions"
    )
    based_on = models.ForeignKey(
        "self", verbose_name=_("基于版本"), null=True, blank=True, on_delete=models.SET_NULL,
        related_name="+",
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, verbose_name=_("创建人"), null=True, blank=True,
        on_delete=models.SET_NULL, related_name="+",
    )
    created_at = models.DateTimeField(_("创建时间"), auto_now_add=True)
    ready_at = models.DateTimeField(_("就绪时间"), null=True, blank=True)
    activated_at = models.DateTimeField(_("最近生效时间"), null=True, blank=True)
    retired_at = models.DateTimeField(_("退役时间"), null=True, blank=True)

    class Meta:
        verbose_name = _("知识库版本")
        verbose_name_plural = _("知识库版本")
        ordering = ["knowledge_base", "-number"]
        constraints = [
            models.UniqueConstraint(
                fields=["knowledge_base", "number"], name="kbversion_unique_number"
            ),
            models.UniqueConstraint(
                fields=["knowledge_base"], condition=Q(status="active"),
                name="kbversion_one_active_per_kb",
            ),
            models.UniqueConstraint(
                fields=["knowledge_base"], condition=Q(status="building"),
                name="kbversion_one_draft_per_kb",
            ),
            models.CheckConstraint(
                condition=Q(status__in=[s.value for s in VersionStatus]),
                name="kbversion_status_valid",
            ),
        ]

    def __str__(self) -> str:
        label = f" {self.label}" if self.label else ""
        return f"{self.knowledge_base.slug} v{self.number}{label}"


class ActivationAction(models.TextChoices):
    ACTIVATE = "activate", _("发布")
    ROLLBACK = "rollback", _("回滚")


class VersionActivation(models.Model):
    """Append-only log of every switch of a knowledge base's active version."""

    knowledge_base = models.ForeignKey(
        KnowledgeBase, verbose_name=_("知识库"), on_delete=models.CASCADE,
        related_name="activations",
    )
    from_version = models.ForeignKey(
        KnowledgeBaseVersion, verbose_name=_("原版本"), null=True, blank=True,
        on_delete=models.PROTECT, related_name="+",
    )
    to_version = models.ForeignKey(
        KnowledgeBaseVersion, verbose_name=_("目标版本"), on_delete=models.PROTECT,
        related_name="activations",
    )
    action = models.CharField(_("操作"), max_length=16, choices=ActivationAction.choices)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, verbose_name=_("操作人"), null=True, blank=True,
        on_delete=models.SET_NULL, related_name="+",
    )
    reason = models.TextField(_("原因"), blank=True)
    # The release check as it stood when publishing, and whether staff overrode a refusal.
    release_check = models.JSONField(_("上线检查"), default=dict, blank=True)
    cache_epoch = models.PositiveBigIntegerField(_("切换后缓存版本"), default=0)
    created_at = models.DateTimeField(_("时间"), auto_now_add=True, db_index=True)

    class Meta:
        verbose_name = _("版本切换记录")
        verbose_name_plural = _("版本切换记录")
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        words = {"kb": self.knowledge_base.slug, "action": self.get_action_display(), "to": self.to_version.number}
        if self.from_version_id is None:
            return gettext("%(kb)s：%(action)s v%(to)s（此前没有生效版本）") % words
        return gettext("%(kb)s：%(action)s v%(from)s → v%(to)s") % {**words, "from": self.from_version.number}


class AuditAction(models.TextChoices):
    KB_CREATED = "kb_created", _("创建知识库")
    KB_UPDATED = "kb_updated", _("修改知识库设置")
    KB_DELETED = "kb_deleted", _("删除知识库")
    DRAFT_CREATED = "draft_created", _("新建草稿版本")
    VERSION_RETIRED = "version_retired", _("退役版本")
    DOCUMENTS_UPLOADED = "documents_uploaded", _("上传文档")
    DOCUMENT_DELETED = "document_deleted", _("删除文档")
    DOCUMENT_RETRIED = "document_retried", _("重试文档")
    DOCUMENT_ATTRIBUTES_UPDATED = "document_attributes_updated", _("修改文档元数据")
    REANALYSIS_SCHEDULED = "reanalysis_scheduled", _("按词典重建索引")
    FAQ_CREATED = "faq_created", _("新增 FAQ")
    FAQ_UPDATED = "faq_updated", _("修改 FAQ")
    FAQ_DELETED = "faq_deleted", _("删除 FAQ")
    CACHE_CLEARED = "cache_cleared", _("清除检索缓存")
    ITEM_SAVED = "item_saved", _("保存商品/型号")
    ITEM_DELETED = "item_deleted", _("删除商品/型号")
    ITEMS_IMPORTED = "items_imported", _("导入商品/型号")
    ITEM_TAGS_EDITED = "item_tags_edited", _("修改分块商品标签")
    FEEDBACK_CASE_SAVED = "feedback_case_saved", _("反馈转为评测问题")


class AuditEntry(models.Model):
    """Append-only log of the writes staff make to a knowledge base, who made them and to what
    (publishing and rollback have their own log, `VersionActivation`). A deleted knowledge
    base's entries stay, with its identifier, for superusers."""

    knowledge_base = models.ForeignKey(
        KnowledgeBase, verbose_name=_("知识库"), null=True, blank=True, on_delete=models.SET_NULL,
        related_name="audit_entries",
    )
    knowledge_base_slug = models.CharField(_("知识库标识"), max_length=64)
    action = models.CharField(_("操作"), max_length=32, choices=AuditAction.choices)
    target = models.CharField(_("对象"), max_length=300, blank=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, verbose_name=_("操作人"), null=True, blank=True,
        on_delete=models.SET_NULL, related_name="+",
    )
    created_at = models.DateTimeField(_("时间"), auto_now_add=True, db_index=True)

    class Meta:
        verbose_name = _("操作记录")
        verbose_name_plural = _("操作记录")
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return gettext("%(kb)s：%(action)s %(target)s") % {
            "kb": self.knowledge_base_slug, "action": self.get_action_display(), "target": self.target,
        }


class DocumentStatus(models.TextChoices):
    UPLOADED = "uploaded", _("已上传")
    QUEUED = "queued", _("排队中")
    PARSING = "parsing", _("解析中")
    INDEXING = "indexing", _("索引中")
    READY = "ready", _("就绪")
    FAILED = "failed", _("失败")


def document_upload_to(instance: "Document", filename: str) -> str:
    # Content-addressed: the same bytes always land on the same key, and user-supplied names
    # never reach the storage path.
    return f"kb/{instance.knowledge_base_id}/documents/{instance.sha256[:2]}/{instance.sha256}"


class Document(models.Model):
    knowledge_base = models.ForeignKey(
        KnowledgeBase, verbose_name=_("知识库"), on_delete=models.CASCADE, related_name="documents"
    )
    title = models.CharField(_("标题"), max_length=300)
    file = models.FileField(_("文件"), upload_to=document_upload_to, max_length=300)
    original_name = models.CharField(_("原始文件名"), max_length=300)
    file_type = models.CharField(_("文件类型"), max_length=16)
    mime_type = models.CharField(_("MIME 类型"), max_length=120)
    sha256 = models.CharField(_("SHA-256"), max_length=64)
    size = models.PositiveBigIntegerField(_("大小（字节）"))
    source_tag = models.CharField(_("来源标签"), max_length=100, blank=True)
    external_id = models.CharField(
        _("外部 ID"), max_length=200, blank=True,
        help_text=_("外部系统或评测集中的文档标识。"),
    )
    status = models.CharField(
        _("状态"), max_length=16, choices=DocumentStatus.choices, default=DocumentStatus.UPLOADED,
        db_index=True,
    )
    error_code = models.CharField(_("错误码"), max_length=64, blank=True)
    error_message = models.TextField(_("错误信息"), blank=True)
    attempts = models.PositiveIntegerField(_("处理次数"), default=0)
    page_count = models.PositiveIntegerField(_("页数"), null=True, blank=True)
    chunk_count = models.PositiveIntegerField(_("分块数"), default=0)
    # The run's embedding progress while it indexes: chunks embedded so far of the chunks its
    # parse produced (0 of 0 before the embed stage starts). Written by the run under its claim.
    embedded_chunks = models.PositiveIntegerField(_("已向量化分块"), default=0, editable=False)
    chunks_to_embed = models.PositiveIntegerField(_("待向量化分块"), default=0, editable=False)
    metadata = models.JSONField(_("元数据"), default=dict, blank=True)
    # Staff's own key/value facts about the document (department, region, valid-from date…),
    # which retrieval filters on; `metadata` is what the system recorded while processing it.
    attributes = models.JSONField(
        _("自定义元数据"), default=dict, blank=True,
        help_text=_("键值对，如 {\"部门\": \"人力资源部\", \"生效日期\": \"2025-01-01\"}；检索和问答可按这些字段筛选。"),
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, verbose_name=_("上传人"), null=True, blank=True,
        on_delete=models.SET_NULL, related_name="+",
    )
    created_at = models.DateTimeField(_("上传时间"), auto_now_add=True)
    updated_at = models.DateTimeField(_("更新时间"), auto_now=True)
    status_changed_at = models.DateTimeField(_("状态变更时间"), null=True, blank=True)
    # The claim of the run processing it (PARSING / INDEXING): a token only that run knows, the
    # worker, and a lease its heartbeat keeps extending. Stale means the lease expired; every
    # write of a run is conditional on still holding the token.
    lease_token = models.CharField(_("处理令牌"), max_length=36, blank=True, editable=False)
    lease_expires_at = models.DateTimeField(_("租约到期"), null=True, blank=True, editable=False)
    heartbeat_at = models.DateTimeField(_("最近心跳"), null=True, blank=True, editable=False)
    worker = models.CharField(_("处理进程"), max_length=120, blank=True, editable=False)

    class Meta:
        verbose_name = _("文档")
        verbose_name_plural = _("文档")
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["knowledge_base", "sha256"], name="document_unique_bytes_per_kb"
            ),
            models.CheckConstraint(
                condition=Q(status__in=[s.value for s in DocumentStatus]),
                name="document_status_valid",
            ),
        ]
        indexes = [
            models.Index(fields=["knowledge_base", "status"], name="document_kb_status"),
            models.Index(fields=["knowledge_base", "external_id"], name="document_kb_external"),
        ]

    def embedding_progress(self) -> str:
        """"已向量化 1,234 / 5,000" while a run embeds it, "" otherwise."""
        if self.status != DocumentStatus.INDEXING or not self.chunks_to_embed:
            return ""
        return _("已向量化 %(done)s / %(total)s") % {
            "done": f"{self.embedded_chunks:,}", "total": f"{self.chunks_to_embed:,}",
        }

    def __str__(self) -> str:
        return self.title


class DocumentTransition(models.Model):
    """One step of a document's timeline (queued, parsing, indexing, ready or failed), written
    only by `knowledge.documents.status` together with the status itself."""

    document = models.ForeignKey(
        Document, verbose_name=_("文档"), on_delete=models.CASCADE, related_name="transitions"
    )
    status = models.CharField(_("状态"), max_length=16, choices=DocumentStatus.choices)
    at = models.DateTimeField(_("时间"))
    attempt = models.PositiveIntegerField(_("第几次处理"), null=True, blank=True)
    worker = models.CharField(_("处理进程"), max_length=120, blank=True)
    error_code = models.CharField(_("错误码"), max_length=64, blank=True)

    class Meta:
        verbose_name = _("文档处理记录")
        verbose_name_plural = _("文档处理记录")
        ordering = ["document", "at", "id"]
        indexes = [models.Index(fields=["document", "at"], name="transition_document_at")]

    def __str__(self) -> str:
        return gettext("文档 %(document)s %(status)s（%(at)s）") % {
            "document": self.document_id, "status": self.get_status_display(), "at": f"{self.at:%Y-%m-%d %H:%M:%S}"}


class ContentType(models.TextChoices):
    TEXT = "text", _("文本")
    TABLE = "table", _("表格")
    IMAGE = "image", _("图片")
    FAQ = "faq", _("FAQ")


class Chunk(models.Model):
    """A retrievable child chunk. Its primary key is also its Milvus primary key."""

    document = models.ForeignKey(
        Document, verbose_name=_("文档"), on_delete=models.CASCADE, related_name="chunks"
    )
    knowledge_base = models.ForeignKey(
        KnowledgeBase, verbose_name=_("知识库"), on_delete=models.CASCADE, related_name="chunks"
    )
    ordinal = models.PositiveIntegerField(_("序号"))
    parent_id = models.CharField(_("父块编号"), max_length=64, blank=True, db_index=True)
    heading_path = models.JSONField(_("标题路径"), default=list, blank=True)
    locator = models.JSONField(
        _("定位"), default=dict, blank=True,
        help_text=_("页码范围、工作表与区域或幻灯片编号。"),
    )
    bboxes = models.JSONField(_("页面区域"), default=list, blank=True)
    content_type = models.CharField(
        _("内容类型"), max_length=16, choices=ContentType.choices, default=ContentType.TEXT
    )
    content = models.TextField(_("内容"))
    token_count = models.PositiveIntegerField(_("词元数"), default=0)
    asset_ids = models.JSONField(_("资源 ID"), default=list, blank=True)
    created_at = models.DateTimeField(_("创建时间"), auto_now_add=True)

    class Meta:
        verbose_name = _("分块")
        verbose_name_plural = _("分块")
        ordering = ["document", "ordinal"]
        constraints = [
            models.UniqueConstraint(fields=["document", "ordinal"], name="chunk_unique_ordinal"),
        ]
        indexes = [
            models.Index(fields=["document", "parent_id", "ordinal"], name="chunk_doc_parent"),
        ]

    def __str__(self) -> str:
        return gettext("「%(document)s」的分块 #%(ordinal)s") % {"document": self.document.title, "ordinal": self.ordinal}


def asset_upload_to(instance: "DocumentAsset", filename: str) -> str:
    return f"kb/{instance.document.knowledge_base_id}/assets/{instance.sha256[:2]}/{instance.sha256}.jpg"


class DocumentAsset(models.Model):
    document = models.ForeignKey(
        Document, verbose_name=_("文档"), on_delete=models.CASCADE, related_name="assets"
    )
    ordinal = models.PositiveIntegerField(_("序号"), default=0)
    page = models.PositiveIntegerField(_("页码"), null=True, blank=True)
    bbox = models.JSONField(_("页面区域"), default=list, blank=True)
    file = models.FileField(_("图片"), upload_to=asset_upload_to, max_length=300)
    width = models.PositiveIntegerField(_("宽"), default=0)
    height = models.PositiveIntegerField(_("高"), default=0)
    caption = models.TextField(_("说明"), blank=True)
    sha256 = models.CharField(_("SHA-256"), max_length=64)
    created_at = models.DateTimeField(_("创建时间"), auto_now_add=True)

    class Meta:
        verbose_name = _("文档资源")
        verbose_name_plural = _("文档资源")
        ordering = ["document", "ordinal"]

    def __str__(self) -> str:
        return gettext("「%(document)s」的第 %(n)s 张图片") % {"document": self.document.title, "n": self.ordinal + 1}


class FAQ(models.Model):
    knowledge_base = models.ForeignKey(
        KnowledgeBase, verbose_name=_("知识库"), on_delete=models.CASCADE, related_name="faqs"
    )
    question = models.CharField(_("标准问题"), max_length=500)
    similar_questions = models.JSONField(_("相似问题"), default=list, blank=True)
    answer = models.TextField(_("答案（Markdown）"))
    source_tag = models.CharField(_("来源标签"), max_length=100, blank=True)
    enabled = models.BooleanField(_("启用"), default=True)
    hit_count = models.PositiveIntegerField(_("命中次数"), default=0, editable=False)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, verbose_name=_("创建人"), null=True, blank=True,
        on_delete=models.SET_NULL, related_name="+",
    )
    created_at = models.DateTimeField(_("创建时间"), auto_now_add=True)
    updated_at = models.DateTimeField(_("更新时间"), auto_now=True)

    class Meta:
        verbose_name = _("FAQ")
        verbose_name_plural = _("FAQ")
        ordering = ["knowledge_base", "question"]
        constraints = [
            models.UniqueConstraint(
                fields=["knowledge_base", "question"], name="faq_unique_question_per_kb"
            ),
        ]

    def __str__(self) -> str:
        return self.question


class Item(models.Model):
    """A product, model or service the knowledge base talks about, with every name people use
    for it. Questions are matched against these names before retrieval, and chunks are tagged
    with the items they are about, so a question about one item reads only that item's text."""

    knowledge_base = models.ForeignKey(
        KnowledgeBase, verbose_name=_("知识库"), on_delete=models.CASCADE, related_name="items"
    )
    name = models.CharField(_("名称"), max_length=200)
    aliases = models.JSONField(_("别名"), default=list, blank=True)
    codes = models.JSONField(_("型号代码"), default=list, blank=True)
    # The family it belongs to ("星河路由器"): a question naming only the family fits every item
    # of it, and is answered with a clarifying question listing them.
    group = models.CharField(_("系列"), max_length=200, blank=True)
    group_aliases = models.JSONField(_("系列别名"), default=list, blank=True)
    description = models.TextField(_("说明"), blank=True)
    enabled = models.BooleanField(_("启用"), default=True)
    created_at = models.DateTimeField(_("创建时间"), auto_now_add=True)
    updated_at = models.DateTimeField(_("更新时间"), auto_now=True)

    class Meta:
        verbose_name = _("商品/型号")
        verbose_name_plural = _("商品/型号")
        ordering = ["knowledge_base", "group", "name"]
        constraints = [
            models.UniqueConstraint(fields=["knowledge_base", "name"], name="item_unique_name_per_kb"),
        ]

    def __str__(self) -> str:
        return self.name


class TagSource(models.TextChoices):
    DETECTED = "detected", _("自动识别")
    MANUAL = "manual", _("人工标注")
    # Staff said the chunk is not about the item although its words name it: detection skips it.
    EXCLUDED = "excluded", _("人工排除")


class ChunkItem(models.Model):
    """A chunk is about an item (or, `EXCLUDED`, is not although it names it). Detected rows are
    rewritten whenever the chunk or the catalog changes; staff's rows stay."""

    chunk = models.ForeignKey(Chunk, verbose_name=_("分块"), on_delete=models.CASCADE, related_name="item_tags")
    item = models.ForeignKey(Item, verbose_name=_("商品/型号"), on_delete=models.CASCADE, related_name="chunk_tags")
    document = models.ForeignKey(
        Document, verbose_name=_("文档"), on_delete=models.CASCADE, related_name="item_tags"
    )
    source = models.CharField(_("来源"), max_length=16, choices=TagSource.choices, default=TagSource.DETECTED)

    class Meta:
        verbose_name = _("分块商品标签")
        verbose_name_plural = _("分块商品标签")
        constraints = [
            models.UniqueConstraint(fields=["chunk", "item"], name="chunk_item_unique"),
        ]
        indexes = [
            models.Index(fields=["item", "document"], name="chunk_item_item_doc"),
        ]

    def __str__(self) -> str:
        return f"{self.item_id} · {self.chunk_id}"


class CacheNamespace(models.Model):
    """L3 of the cache: the current cache generation of a scope (a knowledge base).

    It stores no results. Every L2 key embeds the epoch, so bumping it makes old entries
    unreachable without scanning or deleting them.
    """

    scope = models.CharField(_("分区标识"), max_length=100, unique=True)
    knowledge_base = models.OneToOneField(
        KnowledgeBase, verbose_name=_("知识库"), null=True, blank=True, on_delete=models.CASCADE,
        related_name="cache_namespace",
    )
    cache_epoch = models.PositiveBigIntegerField(_("缓存版本"), default=1)
    updated_at = models.DateTimeField(_("更新时间"), auto_now=True)

    class Meta:
        verbose_name = _("检索缓存分区")
        verbose_name_plural = _("检索缓存分区")

    def __str__(self) -> str:
        owner = self.knowledge_base.name if self.knowledge_base_id else self.scope
        return gettext("%(owner)s 的检索缓存（第 %(epoch)s 版）") % {"owner": owner, "epoch": self.cache_epoch}
