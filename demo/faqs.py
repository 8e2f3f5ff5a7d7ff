"""Curated FAQs for the demo knowledge base, consistent with `content.py`.

Each entry: {question, similar_questions, answer (Markdown), source_tag}. The source tags are the
same ones the demo documents are ingested under (`content.MANIFEST`).
"""

from __future__ import annotations

from demo.content import SOURCE_ADMIN, SOURCE_HANDBOOK, SOURCE_IT, SOURCE_PRODUCT

FAQS: list[dict] = [
    # --- Employee handbook -------------------------------------------------------------------
    {
        "question": "年假有多少天？",
        "similar_questions": ["带薪年假怎么计算？", "工作满一年有几天年假？"],
        "answer": (
            "累计工作满 1 年后享受带薪年假，天数 = 法定年假 + 公司福利年假 2 天：\n\n"
            "| 累计工作年限 | 合计 |\n| --- | --- |\n"
            "| 满 1 年不满 10 年 | 7天 |\n| 满 10 年不满 20 年 | 12天 |\n| 满 20 年及以上 | 17天 |\n\n"
            "新入职员工当年按剩余日历天数折算。"
        ),
        "source_tag": SOURCE_HANDBOOK,
    },
    {
        "question": "今年没休完的年假可以留到明年吗？",
        "similar_questions": ["年假可以顺延吗？", "未休年假会作废吗？"],
        "answer": "可以顺延至**次年 3 月 31 日**，逾期作废，不折算工资。",
        "source_tag": SOURCE_HANDBOOK,
    },
    {
        "question": "陪产假有几天？",
        "similar_questions": ["男员工陪产假多久？", "老婆生孩子可以请几天假？"],
        "answer": "陪产假 **15 天**，须在配偶生产后 3 个月内休完。",
        "source_tag": SOURCE_HANDBOOK,
    },
    {
        "question": "出差住宿标准是多少？",
        "similar_questions": ["出差酒店能报多少钱一晚？", "差旅补贴标准是什么？"],
        "answer": (
            "按城市类别执行（普通员工 / 经理及以上）：\n\n"
            "- 一类城市（北京、上海、广州、深圳）：500元/晚 / 700元/晚\n"
            "- 二类城市（杭州、南京、苏州、成都、武汉、西安、重庆）：350元/晚 / 500元/晚\n"
            "- 三类城市（其他城市）：200元/晚 / 350元/晚\n\n"
            "住宿凭发票在标准内实报实销；伙食补贴和市内交通补贴按天包干，无需发票。"
        ),
        "source_tag": SOURCE_HANDBOOK,
    },
    {
        "question": "报销要在多长时间内提交？",
        "similar_questions": ["费用报销有截止时间吗？", "报销款多久到账？"],
        "answer": (
            "出差结束或费用发生后 **30 天内**在星河OA“费用报销”模块提交，超期原则上不予报销。"
            "财务审核通过后 **7 个工作日内**打入工资卡。"
        ),
        "source_tag": SOURCE_HANDBOOK,
    },
    {
        "question": "新员工入职需要带哪些材料？",
        "similar_questions": ["入职报到要准备什么？", "第一天上班带什么证件？"],
        "answer": (
            "入职当天 9:00 到杭州总部 A 座 1 楼大堂前台报到，携带：\n\n"
            "1. 身份证原件及复印件\n2. 最高学历、学位证书原件\n3. 上一家单位的离职证明\n"
            "4. 招商银行借记卡\n5. 近期 1 寸白底证件照 2 张\n6. 入职体检报告（3 个月内有效）"
        ),
        "source_tag": SOURCE_HANDBOOK,
    },
    {
        "question": "试用期多长？",
        "similar_questions": ["转正需要多久？", "可以提前转正吗？"],
        "answer": "试用期为 **3 个月**。表现优秀可申请提前转正，但试用期不少于 1 个月。",
        "source_tag": SOURCE_HANDBOOK,
    },
    {
        "question": "公司有哪些补贴和福利？",
        "similar_questions": ["午餐补贴多少钱？", "有交通补贴吗？"],
        "answer": (
            "- 午餐补贴：25元/工作日（充值到饭卡）\n- 交通补贴：300元/月\n"
            "- 年度体检：每年 1 次，价值 1,000 元\n- 补充商业医疗保险：报销比例 90%\n"
            "- 生日礼金 300 元；团建经费每人每季度 200 元"
        ),
        "source_tag": SOURCE_HANDBOOK,
    },
    # --- IT help desk -----------------------------------------------------------------------
    {
        "question": "如何重置邮箱密码？",
        "similar_questions": ["忘记邮箱密码怎么办？", "域账号密码怎么重置？"],
        "answer": (
            "邮箱密码就是域账号密码：\n\n"
            "1. 打开 https://password.xinghe.example.com\n2. 输入工号，点击“忘记密码”\n"
            "3. 输入 6 位短信验证码\n4. 设置新密码（至少 12 位），5 分钟内同步到邮箱、VPN 和 Wi-Fi\n\n"
            "手机号已停用的，请本人携带工牌到 A 座 3 楼 305 室 IT 服务台现场重置。"
        ),
        "source_tag": SOURCE_IT,
    },
    {
        "question": "账号被锁定了怎么办？",
        "similar_questions": ["密码输错几次会锁定？", "账号锁定多久自动解锁？"],
        "answer": (
            "连续输错 5 次密码会锁定 **30 分钟**，之后自动解锁。"
            "重置密码后请同步更新手机 Outlook 中的密码，避免旧密码反复登录再次锁定。"
        ),
        "source_tag": SOURCE_IT,
    },
    {
        "question": "在家怎么连接公司 VPN？",
        "similar_questions": ["VPN客户端怎么用？", "远程办公如何访问内网？"],
        "answer": (
            "1. 打开 XH-Connect VPN客户端（5.2 版本），服务器填 `vpn.xinghe.example.com`，端口 443\n"
            "2. 输入域账号和密码\n3. 输入“星河令牌”App 中的 6 位动态码\n\n"
            "空闲 30 分钟自动断开，同一账号最多 2 台设备同时连接。"
        ),
        "source_tag": SOURCE_IT,
    },
    {
        "question": "邮件附件最大可以多大？",
        "similar_questions": ["邮箱容量是多少？", "大文件怎么发给别人？"],
        "answer": "单封邮件附件不超过 **25MB**，邮箱容量 50GB。更大的文件请上传星河云盘后发送分享链接。",
        "source_tag": SOURCE_IT,
    },
    {
        "question": "怎么使用公司打印机？",
        "similar_questions": ["刷卡打印怎么操作？", "彩色打印有额度吗？"],
        "answer": (
            "选择打印队列 **XH-SecurePrint** 提交任务，到任意打印机刷工牌取件（24 小时未取自动删除）。"
            "默认黑白双面；彩色打印每人每月 100 页。首次刷卡无反应需在面板输入域账号密码绑定工牌。"
        ),
        "source_tag": SOURCE_IT,
    },
    {
        "question": "如何申请安装软件？",
        "similar_questions": ["非标准软件怎么申请？", "安装软件需要审批吗？"],
        "answer": (
            "标准软件在“星河软件中心”自助安装。非标准软件在 IT 服务台门户提交“软件申请”表单："
            "直属经理审批 → 信息安全部评估 → 安装。免费软件约 3 个工作日，付费软件约 10 个工作日。"
        ),
        "source_tag": SOURCE_IT,
    },
    {
        "question": "IT 工单多久响应？",
        "similar_questions": ["P1 故障多久解决？", "IT 服务台的 SLA 是多少？"],
        "answer": (
            "| 优先级 | 响应 | 解决 |\n| --- | --- | --- |\n"
            "| P1 紧急 | 15分钟 | 4小时 |\n| P2 高 | 30分钟 | 8小时 |\n"
            "| P3 中 | 2小时 | 3个工作日 |\n| P4 低 | 1个工作日 | 5个工作日 |"
        ),
        "source_tag": SOURCE_IT,
    },
    {
        "question": "公司电脑可以用 U 盘吗？",
        "similar_questions": ["USB 存储设备被禁用了怎么办？", "怎么开通 U 盘权限？"],
        "answer": "公司电脑默认禁用 USB 存储设备；确需使用须经信息安全部审批，开通期限最长 **30 天**。",
        "source_tag": SOURCE_IT,
    },
    {
        "question": "访客怎么连 Wi-Fi？",
        "similar_questions": ["访客网络密码是什么？", "XH-Guest 验证码在哪里拿？"],
        "answer": "访客连接 **XH-Guest**，验证码向前台索取，有效期 8 小时，仅可访问互联网。员工请连接 XH-Office。",
        "source_tag": SOURCE_IT,
    },
    # --- Product manual ---------------------------------------------------------------------
    {
        "question": "星河X3 的保修期是多久？",
        "similar_questions": ["X3 保修几年？", "星河路由器保修多长时间？"],
        "answer": (
            "星河X3 整机保修 **2 年**，电源适配器等配件 1 年。"
            "其他型号：星河X1 1 年，星河X3 Pro 和星河X5 Mesh 3 年。"
        ),
        "source_tag": SOURCE_PRODUCT,
    },
    {
        "question": "星河X3 和 X3 Pro 有什么区别？",
        "similar_questions": ["X3 Pro 比 X3 多了什么？", "X3 Pro 支持 6GHz 吗？"],
        "answer": (
            "| 项目 | 星河X3 | 星河X3 Pro |\n| --- | --- | --- |\n"
            "| Wi-Fi 标准 | Wi-Fi 6 | Wi-Fi 6E |\n| 频段 | 2.4GHz + 5GHz | 2.4GHz + 5GHz + 6GHz |\n"
            "| 最大速率 | 3000Mbps | 5400Mbps |\n| 覆盖 | 140平方米 | 180平方米 |\n"
            "| 价格 | 399元 | 699元 |\n| 保修 | 2年 | 3年 |\n\n"
            "X3 Pro 另有双 2.5G 网口和 USB 3.0 接口。"
        ),
        "source_tag": SOURCE_PRODUCT,
    },
    {
        "question": "路由器怎么恢复出厂设置？",
        "similar_questions": ["忘记路由器管理员密码怎么办？", "RESET 键要按多久？"],
        "answer": (
            "通电状态下用卡针按住背面 **RESET 孔 10 秒**，指示灯变为蓝色闪烁后松开，约 3 分钟完成重启。"
            "所有配置会被清除。"
        ),
        "source_tag": SOURCE_PRODUCT,
    },
    {
        "question": "路由器指示灯橙色常亮是什么意思？",
        "similar_questions": ["指示灯变橙色了怎么办？", "路由器连不上网怎么办？"],
        "answer": "橙色常亮表示**无法连接互联网**：检查网线是否插在蓝色 WAN 口、光猫是否正常、宽带账号是否正确。",
        "source_tag": SOURCE_PRODUCT,
    },
    {
        "question": "星河X1 支持 Mesh 组网吗？",
        "similar_questions": ["哪些型号可以做 Mesh 节点？", "Mesh 最多几个节点？"],
        "answer": "星河X1 **不支持** Mesh。星河X3、星河X3 Pro 可作为 Mesh 节点，星河X5 Mesh 出厂已配对；一个 Mesh 网络最多 6 个节点。",
        "source_tag": SOURCE_PRODUCT,
    },
    # --- Admin notices ----------------------------------------------------------------------
    {
        "question": "2024 年度办公室安全检查是什么时候？",
        "similar_questions": ["安全检查发现问题多久要整改？", "年度安全检查查哪些内容？"],
        "answer": (
            "2024 年 11 月 18 日至 11 月 22 日，检查杭州总部 A 座 3 至 12 层。"
            "发现的问题须在 **3 个工作日内**整改；联系人：行政部王芳，分机 8126。"
        ),
        "source_tag": SOURCE_ADMIN,
    },
]
