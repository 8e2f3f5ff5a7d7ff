"""Evaluation questions for the demo knowledge base.

Each entry: {question, expected_answer, file, must_contain}.
- `expected_answer`: a short string that a correct answer contains, verbatim in `file`.
- `file`: the demo file (see `content.MANIFEST`) holding the gold passage.
- `must_contain`: a distinctive phrase the gold chunk must contain, for retrieval tests.
Both strings are compared after removing whitespace, since PDF extraction and OCR move spaces and
line breaks around (e.g. "3 个工作日" comes back from OCR as "3个工作日").
"""

from __future__ import annotations

QUESTIONS: list[dict] = [
    # employee_handbook.md
    {
        "question": "工作满 3 年的员工每年有几天带薪年假？",
        "expected_answer": "7天",
        "file": "employee_handbook.md",
        "must_contain": "满 1 年不满 10 年",
    },
    {
        "question": "普通员工去深圳出差，住宿标准每晚多少钱？",
        "expected_answer": "500元/晚",
        "file": "employee_handbook.md",
        "must_contain": "北京、上海、广州、深圳",
    },
    {
        "question": "普通员工去三类城市出差，住宿标准是多少？",
        "expected_answer": "200元/晚",
        "file": "employee_handbook.md",
        "must_contain": "三类城市",
    },
    {
        "question": "报销金额超过多少需要财务总监审批？",
        "expected_answer": "20,000 元",
        "file": "employee_handbook.md",
        "must_contain": "财务总监审批",
    },
    {
        "question": "弹性工作制的核心工作时间是几点到几点？",
        "expected_answer": "10:00–16:00",
        "file": "employee_handbook.md",
        "must_contain": "核心工作时间",
    },
    {
        "question": "婚假有几天？",
        "expected_answer": "10 天",
        "file": "employee_handbook.md",
        "must_contain": "领取结婚证后 1 年内",
    },
    {
        "question": "住房公积金的缴存比例是多少？",
        "expected_answer": "12%",
        "file": "employee_handbook.md",
        "must_contain": "住房公积金缴存比例",
    },
    # it_helpdesk_guide.docx
    {
        "question": "域账号密码最少要几位？",
        "expected_answer": "12 位",
        "file": "it_helpdesk_guide.docx",
        "must_contain": "长度至少 12 位",
    },
    {
        "question": "VPN 空闲多久会自动断开？",
        "expected_answer": "30 分钟",
        "file": "it_helpdesk_guide.docx",
        "must_contain": "空闲 30 分钟后自动断开",
    },
    {
        "question": "P2 优先级的工单要在多长时间内解决？",
        "expected_answer": "8小时",
        "file": "it_helpdesk_guide.docx",
        "must_contain": "个人完全无法工作",
    },
    {
        "question": "每人每月可以彩色打印多少页？",
        "expected_answer": "100 页",
        "file": "it_helpdesk_guide.docx",
        "must_contain": "彩色打印每人每月额度",
    },
    {
        "question": "IT 服务台的现场服务点在哪里？",
        "expected_answer": "A 座 3 楼 305 室",
        "file": "it_helpdesk_guide.docx",
        "must_contain": "现场服务点",
    },
    # product_specs.xlsx
    {
        "question": "星河X3 Pro 的最大无线速率是多少？",
        "expected_answer": "5400Mbps",
        "file": "product_specs.xlsx",
        "must_contain": "Wi-Fi 6E",
    },
    {
        "question": "星河X5 Mesh 两只装的建议零售价是多少？",
        "expected_answer": "1599元",
        "file": "product_specs.xlsx",
        "must_contain": "1599元（两只装）",
    },
    {
        "question": "成都的售后服务网点电话是多少？",
        "expected_answer": "400-826-9900 转 5",
        "file": "product_specs.xlsx",
        "must_contain": "星河成都服务站",
    },
    # product_manual.pdf
    {
        "question": "星河路由器的管理地址是什么？",
        "expected_answer": "192.168.10.1",
        "file": "product_manual.pdf",
        "must_contain": "http://192.168.10.1",
    },
    {
        "question": "路由器什么时候自动升级固件？",
        "expected_answer": "3:00–5:00",
        "file": "product_manual.pdf",
        "must_contain": "凌晨 3:00–5:00",
    },
    {
        "question": "星河X1 推荐覆盖多大面积？",
        "expected_answer": "90平方米",
        "file": "product_manual.pdf",
        "must_contain": "推荐覆盖面积",
    },
    {
        "question": "产品序列号在哪里可以找到？",
        "expected_answer": "机身底部标签",
        "file": "product_manual.pdf",
        "must_contain": "以“XH”开头的 16 位字符",
    },
    {
        "question": "恢复出厂设置要按住 RESET 孔多久？",
        "expected_answer": "10 秒",
        "file": "product_manual.pdf",
        "must_contain": "按住机身背面的 RESET 孔",
    },
    # scanned_safety_notice.pdf (image only: reachable through OCR alone)
    {
        "question": "办公室安全检查发现的问题要在几天内整改？",
        "expected_answer": "3 个工作日",
        "file": "scanned_safety_notice.pdf",
        "must_contain": "完成整改",
    },
    {
        "question": "2024 年度办公室安全检查的联系人是谁？",
        "expected_answer": "王芳",
        "file": "scanned_safety_notice.pdf",
        "must_contain": "分机 8126",
    },
    # office_locations.csv
    {
        "question": "上海分公司的前台电话是多少？",
        "expected_answer": "分机 8200",
        "file": "office_locations.csv",
        "must_contain": "上海分公司",
    },
    # it_announcement_vpn.html
    {
        "question": "旧版 XH-Connect 客户端什么时候停止服务？",
        "expected_answer": "2025 年 3 月 31 日",
        "file": "it_announcement_vpn.html",
        "must_contain": "停止服务",
    },
]


# More of the same shape for the demo evaluation set (`evaluation.demo`): they are checked against
# the files like the ones above, but kept out of the relevance calibration measured on QUESTIONS.
MORE_QUESTIONS: list[dict] = [
    {"question": "病假证明要在返岗后几天内提交？", "expected_answer": "3 个工作日内",
     "file": "employee_handbook.md", "must_contain": "二级及以上医院"},
    {"question": "陪产假有多少天？", "expected_answer": "15 天", "file": "employee_handbook.md",
     "must_contain": "陪产假"},
    {"question": "每个月迟到几次以内不扣款？", "expected_answer": "3 次", "file": "employee_handbook.md",
     "must_contain": "不扣款"},
    {"question": "法定节假日加班的工资按多少支付？", "expected_answer": "300%", "file": "employee_handbook.md",
     "must_contain": "法定节假日加班"},
    {"question": "招待客户的人均标准是多少？", "expected_answer": "300 元", "file": "employee_handbook.md",
     "must_contain": "人均标准"},
    {"question": "每月几号发工资？", "expected_answer": "10 日", "file": "employee_handbook.md",
     "must_contain": "发放上月工资"},
    {"question": "新员工导师每月有多少津贴？", "expected_answer": "500 元", "file": "employee_handbook.md",
     "must_contain": "导师津贴"},
    {"question": "HR 服务热线的分机号是多少？", "expected_answer": "8100", "file": "employee_handbook.md",
     "must_contain": "HR 服务热线"},
    {"question": "报销审核通过后多久到账？", "expected_answer": "7 个工作日内", "file": "employee_handbook.md",
     "must_contain": "报销款打入员工工资卡"},
    {"question": "试用期是多长时间？", "expected_answer": "3 个月", "file": "employee_handbook.md",
     "must_contain": "劳动合同期限"},
    {"question": "密码连续输错几次账号会被锁定？", "expected_answer": "5 次", "file": "it_helpdesk_guide.docx",
     "must_contain": "账号将被锁定"},
    {"question": "单封邮件的附件最大能有多大？", "expected_answer": "25MB", "file": "it_helpdesk_guide.docx",
     "must_contain": "附件总大小"},
    {"question": "同一个账号最多几台设备同时连 VPN？", "expected_answer": "2 台", "file": "it_helpdesk_guide.docx",
     "must_contain": "同时连接"},
    {"question": "下班时间出现 P1 紧急故障该打哪个电话？", "expected_answer": "8999", "file": "it_helpdesk_guide.docx",
     "must_contain": "24 小时值班电话"},
    {"question": "访客 Wi-Fi 的验证码有效期多久？", "expected_answer": "8 小时", "file": "it_helpdesk_guide.docx",
     "must_contain": "验证码由前台发放"},
    {"question": "付费软件的申请一般多久能装好？", "expected_answer": "10 个工作日", "file": "it_helpdesk_guide.docx",
     "must_contain": "付费软件一般"},
    {"question": "USB 存储设备最长可以开通多少天？", "expected_answer": "30 天", "file": "it_helpdesk_guide.docx",
     "must_contain": "USB 存储设备"},
    {"question": "未取走的打印任务多久后自动删除？", "expected_answer": "24 小时", "file": "it_helpdesk_guide.docx",
     "must_contain": "未取走的打印任务"},
]

# Questions no demo document answers (plausible for this company, so they reach retrieval):
# the right outcome is "the knowledge base cannot say", never an invented answer.
UNANSWERABLE: list[str] = [
    "公司的年终奖一般发几个月工资？",
    "星河X7 路由器什么时候上市？",
    "员工宿舍每个月的房租是多少？",
    "成都分公司的通勤班车几点发车？",
    "公司的股票期权怎么行权？",
    "食堂晚餐几点开始供应？",
]


# Questions as employees ask them: reworded, in traditional characters, in English, as
# follow-ups (after the questions in "history", in one conversation), about look-alike products
# and table cells. "expected_answer" is verbatim in the demo documents, as above.
ASKED: list[dict] = [
    {"category": "paraphrase", "question": "我入职三年了，一年能休几天年假？", "expected_answer": "7天", "file": "employee_handbook.md"},
    {"category": "paraphrase", "question": "在深圳出差住酒店一晚最多能报多少钱？", "expected_answer": "500元", "file": "employee_handbook.md"},
    {"category": "paraphrase", "question": "电脑登录密码至少得设几个字符？", "expected_answer": "12 位", "file": "it_helpdesk_guide.docx"},
    {"category": "paraphrase", "question": "连着 VPN 不操作多长时间会被断掉？", "expected_answer": "30 分钟", "file": "it_helpdesk_guide.docx"},
    {"category": "paraphrase", "question": "结婚可以休多少天假？", "expected_answer": "10 天", "file": "employee_handbook.md"},
    {"category": "paraphrase", "question": "工资每个月几号到账？", "expected_answer": "10 日", "file": "employee_handbook.md"},
    {"category": "paraphrase", "question": "新人的试用期一般多长时间？", "expected_answer": "3 个月", "file": "employee_handbook.md"},
    {"category": "paraphrase", "question": "路由器的序列号印在什么地方？", "expected_answer": "机身底部标签", "file": "product_manual.pdf"},
    {"category": "traditional", "question": "婚假有幾天？", "expected_answer": "10 天", "file": "employee_handbook.md"},
    {"category": "traditional", "question": "陪產假有多少天？", "expected_answer": "15 天", "file": "employee_handbook.md"},
    {"category": "traditional", "question": "域賬號密碼最少要幾位？", "expected_answer": "12 位", "file": "it_helpdesk_guide.docx"},
    {"category": "traditional", "question": "報銷審核通過後多久到賬？", "expected_answer": "7 个工作日", "file": "employee_handbook.md"},
    {"category": "english", "question": "How many days of marriage leave do employees get?", "expected_answer": "10 天", "file": "employee_handbook.md"},
    {"category": "english", "question": "What is the VPN idle timeout?", "expected_answer": "30 分钟", "file": "it_helpdesk_guide.docx"},
    {"category": "english", "question": "What is the router's management address?", "expected_answer": "192.168.10.1", "file": "product_manual.pdf"},
    {"category": "english", "question": "How long is the probation period?", "expected_answer": "3 个月", "file": "employee_handbook.md"},
    {"category": "english", "question": "How many days of paternity leave can I take?", "expected_answer": "15 天", "file": "employee_handbook.md"},
    {"category": "follow_up", "history": ["恢复出厂设置要按住 RESET 孔多久？"], "question": "那管理地址是什么？",
     "expected_answer": "192.168.10.1", "file": "product_manual.pdf"},
    {"category": "follow_up", "history": ["婚假有几天？"], "question": "那产假呢？", "expected_answer": "158 天", "file": "employee_handbook.md"},
    {"category": "follow_up", "history": ["普通员工去深圳出差，住宿标准每晚多少钱？"], "question": "那三类城市呢？",
     "expected_answer": "200元/晚", "file": "employee_handbook.md"},
    {"category": "follow_up", "history": ["星河X3 的建议零售价是多少？"], "question": "那 X3 Pro 呢？",
     "expected_answer": "699元", "file": "product_specs.xlsx"},
    {"category": "follow_up", "history": ["星河X1 推荐覆盖多大面积？"], "question": "那 X5 Mesh 呢？",
     "expected_answer": "300平方米", "file": "product_specs.xlsx"},
    {"category": "follow_up", "history": ["VPN 空闲多久会自动断开？"], "question": "单次连接最长多久？",
     "expected_answer": "12 小时", "file": "it_helpdesk_guide.docx"},
    {"category": "follow_up", "history": ["上海分公司的前台电话是多少？"], "question": "那 HR 服务热线呢？",
     "expected_answer": "8100", "file": "employee_handbook.md"},
    {"category": "lookalike", "question": "星河X3 Pro 的保修期是多久？", "expected_answer": "3年", "file": "product_specs.xlsx"},
    {"category": "lookalike", "question": "星河X3 的建议零售价是多少？", "expected_answer": "399元", "file": "product_specs.xlsx"},
    {"category": "lookalike", "question": "星河X1 的最大无线速率是多少？", "expected_answer": "1800Mbps", "file": "product_specs.xlsx"},
    {"category": "lookalike", "question": "星河X5 Mesh 的整机保修期是几年？", "expected_answer": "3年", "file": "product_specs.xlsx"},
    {"category": "table", "question": "星河X3 Pro 有多重？", "expected_answer": "780g", "file": "product_specs.xlsx"},
    {"category": "table", "question": "工作满 12 年的员工年假一共几天？", "expected_answer": "12天", "file": "employee_handbook.md"},
    {"category": "table", "question": "上海服务站的营业时间是什么？", "expected_answer": "周一至周六 9:00–18:00", "file": "product_specs.xlsx"},
    {"category": "image", "question": "WAN 口是什么颜色？", "expected_answer": "蓝色", "file": "product_manual.pdf"},
    # Look-alike products named by a shortened name or a code: that product's value, not a sibling's.
    {"category": "lookalike", "question": "X3 的保修期是多久？", "expected_answer": "2年", "file": "product_specs.xlsx"},
    {"category": "lookalike", "question": "XH-X3P 的建议零售价是多少？", "expected_answer": "699元", "file": "product_specs.xlsx"},
    {"category": "lookalike", "question": "星河X3Pro 有几根天线？", "expected_answer": "8 根外置天线", "file": "product_specs.xlsx"},
    {"category": "lookalike", "question": "星河X5 的重量是多少？", "expected_answer": "1.1kg", "file": "product_specs.xlsx"},
    # The family alone fits all four: asked back which one (a clarifying question counts apart).
    {"category": "ambiguous", "question": "星河路由器多少钱？", "expected_answer": "元", "file": "product_specs.xlsx"},
    {"category": "ambiguous", "question": "星河 X 系列的保修期是多久？", "expected_answer": "年", "file": "product_specs.xlsx"},
]

# Asked-like questions nothing in the demo answers: off-topic, or about a product that does not
# exist, in either language.
ASKED_UNANSWERABLE: list[str] = [
    "请给我一份红烧肉菜谱。",
    "今天北京天气怎么样？",
    "星河X9 的价格是多少？",
    "What is the CEO's annual salary?",
    "公司年会今年在哪个酒店举办？",
]
