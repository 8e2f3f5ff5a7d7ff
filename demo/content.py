"""Source text of the bundled demo knowledge base, as plain Python data.

Everything the demo files say is written here once; `build.py` only renders it. The company
("星河智造科技有限公司"), its people, phone extensions, domains and products are fictional. The
facts are kept consistent across documents, FAQs (`faqs.py`) and the evaluation set
(`questions.py`), so every question has one exact answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

COMPANY = "星河智造科技有限公司"

# Fixed so that rebuilt files carry the same metadata (and, where the library allows, bytes).
FIXED_TIMESTAMP = (2025, 3, 1, 9, 0, 0)


@dataclass(frozen=True)
class Table:
    header: list[str]
    rows: list[list[str]]
    caption: str = ""

    def transposed(self) -> Table:
        """Specs read better as rows in a narrow page, models as rows in a spreadsheet."""
        columns = [self.header, *self.rows]
        header = [column[0] for column in columns]
        rows = [[column[index] for column in columns] for index in range(1, len(self.header))]
        return Table(header=header, rows=rows, caption=self.caption)


@dataclass(frozen=True)
class Bullets:
    items: list[str]
    ordered: bool = False


@dataclass(frozen=True)
class Figure:
    """A generated illustration; `kind` selects the drawing routine in the builder."""

    kind: Literal["router_back_panel"]
    caption: str


Block = str | Table | Bullets | Figure


@dataclass(frozen=True)
class Section:
    heading: str
    blocks: list[Block] = field(default_factory=list)
    subsections: list[Section] = field(default_factory=list)


@dataclass(frozen=True)
class Document:
    title: str
    subtitle: str
    intro: list[Block]
    sections: list[Section]


@dataclass(frozen=True)
class Slide:
    title: str
    bullets: list[str]


@dataclass(frozen=True)
class Notice:
    """A short official notice, rendered as pixels only (scanned page, PNG image)."""

    title: str
    lines: list[str]
    reference: str = ""  # the document number printed under the title
    signoff: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------
# Employee handbook (Markdown)
# ---------------------------------------------------------------------------------------------

EMPLOYEE_HANDBOOK = Document(
    title=f"{COMPANY}员工手册",
    subtitle="2025 年版 · 人力资源部发布 · 适用于全体正式员工",
    intro=[
        "本手册介绍公司的工作时间、假期、差旅报销、入职流程和员工福利。"
        "本手册适用于与公司签订劳动合同的全体员工，实习生和外包人员参照执行，具体以各自协议为准。"
        "如本手册与国家法律法规不一致，以法律法规为准。",
    ],
    sections=[
        Section(
            heading="1. 公司简介",
            blocks=[
                f"{COMPANY}成立于 2015 年，总部位于杭州市滨江区星河路 88 号星河大厦，"
                "在上海、深圳、成都设有分公司，员工约 1,200 人。"
                "公司主要产品为星河 X 系列智能路由器（星河X1、星河X3、星河X3 Pro、星河X5 Mesh）"
                "和中小企业组网方案。",
                "公司内部系统：星河OA（审批、考勤、报销）、星河商旅（机票酒店预订）、"
                "星河云盘（文件共享）、IT 服务台门户（报修与申请）。",
            ],
        ),
        Section(
            heading="2. 工作时间与考勤",
            subsections=[
                Section(
                    heading="2.1 标准工时",
                    blocks=[
                        "公司实行每周五天、每天 8 小时的标准工时制。"
                        "标准上班时间为 9:00–18:00，午休时间为 12:00–13:00。",
                    ],
                ),
                Section(
                    heading="2.2 弹性工作制",
                    blocks=[
                        "研发、产品和设计岗位实行弹性工作制：上班打卡时间可在 8:30–10:00 之间，"
                        "每天须工作满 8 小时（不含午休），核心工作时间 10:00–16:00 必须在岗。",
                    ],
                ),
                Section(
                    heading="2.3 考勤打卡",
                    blocks=[
                        "员工通过星河OA 手机 App 或办公区门禁闸机打卡。"
                        "迟到 30 分钟以内计为迟到，超过 30 分钟且未请假的按旷工半天处理。"
                        "每月迟到不超过 3 次（含 3 次）不扣款。",
                        "忘记打卡的，须在 3 个工作日内在星河OA 提交补卡申请，每月补卡不超过 3 次。",
                    ],
                ),
                Section(
                    heading="2.4 加班与调休",
                    blocks=[
                        "加班须提前在星河OA 提交加班申请并经直属上级批准。"
                        "工作日和休息日加班优先安排调休，调休须在加班后 6 个月内使用；"
                        "法定节假日加班按国家规定支付 300% 工资。",
                        "工作日 21:00 以后离开公司的，可凭电子发票报销当晚回家的打车费用。",
                    ],
                ),
            ],
        ),
        Section(
            heading="3. 假期",
            subsections=[
                Section(
                    heading="3.1 带薪年假",
                    blocks=[
                        "员工累计工作满 1 年后享受带薪年假。"
                        "公司在法定年假基础上每年额外给予 2 天福利年假，具体天数如下表。",
                        Table(
                            caption="带薪年假天数",
                            header=["累计工作年限", "法定年假", "公司福利年假", "合计"],
                            rows=[
                                ["满 1 年不满 10 年", "5天", "2天", "7天"],
                                ["满 10 年不满 20 年", "10天", "2天", "12天"],
                                ["满 20 年及以上", "15天", "2天", "17天"],
                            ],
                        ),
                        "年假按自然年计算，新入职员工当年的年假按剩余日历天数折算，不足 1 天的部分不享受。"
                        "当年未休完的年假可顺延至次年 3 月 31 日，逾期作废，不折算工资。",
                        "年假须提前 3 个工作日在星河OA 申请；连续休 5 天及以上的，须提前 2 周申请。",
                    ],
                ),
                Section(
                    heading="3.2 病假",
                    blocks=[
                        "员工因病需要休息的，须在当天 10:00 前告知直属上级，"
                        "并在返岗后 3 个工作日内提交二级及以上医院出具的病假证明。",
                        "每年前 5 天病假全额发放工资；超过 5 天的部分按本人基本工资的 80% 发放，"
                        "且不低于当地最低工资标准的 80%。",
                    ],
                ),
                Section(
                    heading="3.3 其他假期",
                    blocks=[
                        Bullets(
                            items=[
                                "婚假：10 天（含法定 3 天），须在领取结婚证后 1 年内一次性休完。",
                                "产假：158 天，难产或多胞胎按国家和地方规定增加。",
                                "陪产假：15 天，须在配偶生产后 3 个月内休完。",
                                "丧假：直系亲属去世给予 3 天。",
                                "事假：无薪，每年累计不超过 10 天，须提前 1 个工作日申请。",
                            ]
                        ),
                    ],
                ),
            ],
        ),
        Section(
            heading="4. 差旅与费用报销",
            subsections=[
                Section(
                    heading="4.1 出差审批",
                    blocks=[
                        "出差须提前在星河OA 提交出差申请，经部门经理审批；"
                        "出差 5 天以上或出境出差的，还须部门总监审批。",
                        "机票、火车票和酒店统一通过公司差旅平台“星河商旅”预订，由公司直接结算，员工无需垫付。"
                        "普通员工乘坐飞机经济舱、高铁二等座；总监及以上可乘坐高铁一等座。",
                    ],
                ),
                Section(
                    heading="4.2 差旅补贴标准",
                    blocks=[
                        "国内出差的住宿、伙食和市内交通补贴按城市类别执行：",
                        Table(
                            caption="国内差旅补贴标准（按城市类别）",
                            header=[
                                "城市类别", "包含城市", "住宿标准（普通员工）",
                                "住宿标准（经理及以上）", "伙食补贴", "市内交通补贴",
                            ],
                            rows=[
                                ["一类城市", "北京、上海、广州、深圳",
                                 "500元/晚", "700元/晚", "120元/天", "80元/天"],
                                ["二类城市", "杭州、南京、苏州、成都、武汉、西安、重庆",
                                 "350元/晚", "500元/晚", "100元/天", "60元/天"],
                                ["三类城市", "其他城市",
                                 "200元/晚", "350元/晚", "80元/天", "40元/天"],
                            ],
                        ),
                        "住宿费凭发票在标准内实报实销，超出部分由员工自理；"
                        "伙食补贴和市内交通补贴按出差天数包干发放，无需提供发票。",
                    ],
                ),
                Section(
                    heading="4.3 报销流程",
                    blocks=[
                        Bullets(
                            ordered=True,
                            items=[
                                "出差结束或费用发生后 30 天内，在星河OA 的“费用报销”模块提交报销单；"
                                "超过 30 天提交的原则上不予报销。",
                                "上传发票电子版；纸质发票粘贴在报销单上，交至财务部（杭州总部 A 座 7 楼）。",
                                "单笔金额 5,000 元以下由部门经理审批；5,000 元（含）至 20,000 元由部门总监加签；"
                                "超过 20,000 元还须财务总监审批。",
                                "财务部审核通过后 7 个工作日内，报销款打入员工工资卡。",
                            ],
                        ),
                        f"发票抬头须为“{COMPANY}”，纳税人识别号可在星河OA 首页的“常用信息”中查询。",
                    ],
                ),
                Section(
                    heading="4.4 业务招待",
                    blocks=[
                        "招待客户须事先在星河OA 提交招待申请，人均标准不超过 300 元，"
                        "报销时须注明客户单位和参与人数。",
                    ],
                ),
            ],
        ),
        Section(
            heading="5. 入职指南",
            subsections=[
                Section(
                    heading="5.1 报到当天",
                    blocks=[
                        "新员工入职当天 9:00 到杭州总部 A 座 1 楼大堂前台报到，"
                        "由人力资源部（HR）带领办理入职手续。请携带以下材料：",
                        Bullets(
                            items=[
                                "身份证原件及复印件",
                                "最高学历、学位证书原件",
                                "上一家单位的离职证明",
                                "招商银行借记卡（用于发放工资和报销款）",
                                "近期 1 寸白底证件照 2 张",
                                "入职体检报告（3 个月内有效）",
                            ]
                        ),
                        "IT 服务台会在入职当天为新员工开通域账号、企业邮箱和星河OA 账号，"
                        "初始密码通过短信发送到登记的手机号，首次登录须修改密码。"
                        "工牌和笔记本电脑在 A 座 3 楼 305 室 IT 服务台领取。",
                    ],
                ),
                Section(
                    heading="5.2 第一周安排",
                    blocks=[
                        Table(
                            caption="新员工第一周安排",
                            header=["时间", "事项", "负责人"],
                            rows=[
                                ["第 1 天上午", "办理入职手续、签订劳动合同", "HR"],
                                ["第 1 天下午", "领取工牌和笔记本电脑、开通账号", "IT 服务台"],
                                ["第 2–3 天", "“星河启航”新员工培训（2 天）", "HR、各部门讲师"],
                                ["第 1 周内", "与导师见面，制定试用期目标", "直属上级、导师"],
                            ],
                        ),
                    ],
                ),
                Section(
                    heading="5.3 试用期与导师制",
                    blocks=[
                        "劳动合同期限一般为 3 年，试用期为 3 个月。试用期满前 2 周，"
                        "直属上级与 HR 共同进行转正评估；表现优秀者可申请提前转正，但试用期不少于 1 个月。",
                        "每位新员工配备一名导师（Buddy），陪伴期为 3 个月，导师每月获得 500 元导师津贴。",
                    ],
                ),
            ],
        ),
        Section(
            heading="6. 薪酬与福利",
            subsections=[
                Section(
                    heading="6.1 工资发放",
                    blocks=["每月 10 日发放上月工资，遇法定节假日或周末提前发放。"],
                ),
                Section(
                    heading="6.2 社会保险与住房公积金",
                    blocks=[
                        "公司按国家和当地规定为员工缴纳五险一金，"
                        "住房公积金缴存比例为单位和个人各 12%。",
                    ],
                ),
                Section(
                    heading="6.3 补充福利",
                    blocks=[
                        Table(
                            caption="补充福利一览",
                            header=["福利项目", "标准", "说明"],
                            rows=[
                                ["补充商业医疗保险", "每人每年，公司全额承担",
                                 "覆盖门诊和住院，报销比例 90%，子女可低价加保"],
                                ["年度体检", "每年 1 次，价值 1,000 元", "每年 4–6 月由 HR 统一安排"],
                                ["午餐补贴", "25元/工作日", "按月充值到饭卡"],
                                ["交通补贴", "300元/月", "随工资发放"],
                                ["生日礼金", "300元", "生日当月随工资发放"],
                                ["团建经费", "每人每季度 200 元", "由部门统一安排使用"],
                                ["节日福利", "春节、端午、中秋", "发放礼品卡或实物"],
                            ],
                        ),
                        "员工援助计划（EAP）为员工及直系家属提供 24 小时免费、保密的心理咨询服务，"
                        "预约方式见星河OA 首页的“员工关爱”栏目。",
                    ],
                ),
            ],
        ),
        Section(
            heading="7. 联系人力资源部",
            blocks=[
                "HR 服务热线：分机 8100（工作日 9:00–18:00）；邮箱：hr@xinghe.example.com；"
                "办公地点：杭州总部 A 座 6 楼。",
            ],
        ),
    ],
)


# ---------------------------------------------------------------------------------------------
# IT help-desk guide (DOCX)
# ---------------------------------------------------------------------------------------------

IT_GUIDE = Document(
    title="星河智造 IT 服务台使用指南",
    subtitle="版本 3.2 · 2025 年 3 月 · 信息技术部",
    intro=[
        "本指南说明如何联系 IT 服务台、管理账号密码、远程接入公司网络、使用邮箱和打印机、"
        "申请软件，以及必须遵守的信息安全规定。",
    ],
    sections=[
        Section(
            heading="1. 联系 IT 服务台",
            blocks=[
                "IT 服务台工作时间为工作日 8:30–18:30，服务热线为分机 8000，"
                "邮箱为 it@xinghe.example.com，自助门户为 https://itsm.xinghe.example.com。"
                "现场服务点位于杭州总部 A 座 3 楼 305 室。"
                "非工作时间发生 P1 紧急故障，请拨打 24 小时值班电话分机 8999。",
            ],
            subsections=[
                Section(
                    heading="1.1 工单优先级与服务时限（SLA）",
                    blocks=[
                        "提交工单时请如实选择优先级，IT 服务台按下表的服务时限处理：",
                        Table(
                            caption="工单优先级与服务时限",
                            header=["优先级", "定义", "示例", "响应时间", "解决时间"],
                            rows=[
                                ["P1 紧急", "多人或整个部门业务中断", "公司网络中断、邮件系统宕机",
                                 "15分钟", "4小时"],
                                ["P2 高", "个人完全无法工作", "电脑无法开机、账号被锁定",
                                 "30分钟", "8小时"],
                                ["P3 中", "部分功能受影响，有替代办法", "打印机卡纸、软件报错",
                                 "2小时", "3个工作日"],
                                ["P4 低", "咨询或新需求", "软件安装申请、权限开通",
                                 "1个工作日", "5个工作日"],
                            ],
                        ),
                        "服务时限按服务台工作时间计算，P1 工单除外（7×24 小时处理）。"
                        "工单超时未处理的，可联系 IT 服务经理李华（分机 8001）升级。",
                    ],
                ),
            ],
        ),
        Section(
            heading="2. 账号与密码",
            subsections=[
                Section(
                    heading="2.1 密码规则",
                    blocks=[
                        "域账号即工号（例如 XH10086），域账号密码同时用于登录电脑、企业邮箱、"
                        "VPN、星河OA 和办公 Wi-Fi。密码必须满足以下规则：",
                        Bullets(
                            items=[
                                "长度至少 12 位；",
                                "包含大写字母、小写字母、数字、特殊符号中的至少 3 类；",
                                "不得包含用户名或姓名拼音；",
                                "每 90 天必须修改一次，且不得与最近 5 次使用过的密码相同。",
                            ]
                        ),
                        "连续输错 5 次密码，账号将被锁定 30 分钟，之后自动解锁。",
                    ],
                ),
                Section(
                    heading="2.2 自助重置密码（含邮箱密码）",
                    blocks=[
                        "企业邮箱密码就是域账号密码，忘记密码时可通过密码自助服务平台重置：",
                        Bullets(
                            ordered=True,
                            items=[
                                "打开密码自助服务平台 https://password.xinghe.example.com"
                                "（公司内网、VPN 和手机浏览器均可访问）；",
                                "输入域账号（工号），点击“忘记密码”；",
                                "输入发送到登记手机号的 6 位短信验证码；",
                                "设置符合规则的新密码，新密码在 5 分钟内同步到邮箱、VPN 和 Wi-Fi。",
                            ],
                        ),
                        "如果登记的手机号已停用，请本人携带工牌到 IT 服务台（A 座 3 楼 305 室）现场重置，"
                        "不支持电话重置或他人代办。",
                        "重置密码后，请在手机上的 Outlook 和邮件 App 中更新为新密码，"
                        "否则它们会反复使用旧密码登录，导致账号被锁定。",
                    ],
                ),
            ],
        ),
        Section(
            heading="3. VPN 远程访问",
            subsections=[
                Section(
                    heading="3.1 安装 VPN客户端",
                    blocks=[
                        "公司使用 XH-Connect VPN客户端（当前版本 5.2），支持 Windows 10/11、"
                        "macOS 12 及以上、iOS 和 Android。公司电脑已预装；"
                        "个人设备可从 https://vpn.xinghe.example.com 下载安装。",
                    ],
                ),
                Section(
                    heading="3.2 连接步骤",
                    blocks=[
                        Bullets(
                            ordered=True,
                            items=[
                                "打开 XH-Connect，服务器地址填写 vpn.xinghe.example.com，端口 443；",
                                "输入域账号和密码；",
                                "输入手机“星河令牌”App 显示的 6 位动态验证码（每 30 秒刷新一次）；",
                                "连接成功后，任务栏中的 XH-Connect 图标变为绿色。",
                            ],
                        ),
                    ],
                ),
                Section(
                    heading="3.3 使用规则与常见问题",
                    blocks=[
                        "VPN 连接空闲 30 分钟后自动断开，单次连接最长 12 小时；"
                        "同一账号最多允许 2 台设备同时连接。访问财务系统和源代码仓库必须使用公司电脑。",
                        Table(
                            caption="VPN 常见错误",
                            header=["错误提示", "原因", "解决办法"],
                            rows=[
                                ["证书无效", "客户端版本过旧", "升级 XH-Connect 到 5.2 版本"],
                                ["动态码错误", "手机时间不准", "在手机设置中开启“自动设置时间”"],
                                ["连接超时", "家庭网络屏蔽了 443 端口", "改用手机热点后重试"],
                            ],
                        ),
                    ],
                ),
            ],
        ),
        Section(
            heading="4. 企业邮箱",
            subsections=[
                Section(
                    heading="4.1 Outlook 配置",
                    blocks=[
                        "公司邮箱基于 Microsoft Exchange，推荐使用 Outlook 客户端。"
                        "邮箱地址格式为“姓名全拼@xinghe.example.com”，例如 zhangsan@xinghe.example.com。"
                        "公司电脑首次打开 Outlook 会自动完成配置；手机请安装 Outlook App，"
                        "输入邮箱地址和域账号密码即可登录。",
                    ],
                ),
                Section(
                    heading="4.2 容量与附件限制",
                    blocks=[
                        "每个邮箱容量为 50GB，单封邮件附件总大小不超过 25MB。"
                        "超过 25MB 的文件请上传到星河云盘后发送分享链接。"
                        "来自外部的 .exe、.bat 等可执行附件会被自动拦截。",
                    ],
                ),
                Section(
                    heading="4.3 钓鱼邮件",
                    blocks=[
                        "收到可疑邮件时，不要点击链接或打开附件，请点击 Outlook 工具栏上的“报告钓鱼”按钮，"
                        "或将邮件作为附件转发至 security@xinghe.example.com。",
                    ],
                ),
            ],
        ),
        Section(
            heading="5. 打印机",
            blocks=[
                "各楼层打印区采用安全打印（刷卡打印）：在电脑上选择打印队列 XH-SecurePrint 提交任务，"
                "然后到任意一台公司打印机上刷工牌取件。未取走的打印任务 24 小时后自动删除。",
                "打印机默认黑白双面打印；彩色打印每人每月额度为 100 页，超出须经部门经理审批。"
                "A3 幅面打印仅限 6 楼打印区。",
                "首次使用时刷卡无反应，说明工牌尚未绑定：请在打印机面板上输入域账号和密码完成一次绑定。"
                "打印机卡纸时，按面板提示打开侧门取出纸张；仍无法解决的，请提交 P3 工单。",
            ],
        ),
        Section(
            heading="6. 软件申请",
            blocks=[
                "标准软件（如 Office、WPS、企业微信、Chrome、7-Zip）已上架“星河软件中心”，"
                "可自助安装，无需审批。",
                "非标准软件须在 IT 服务台门户提交“软件申请”表单，填写软件名称、版本、用途和许可证情况，"
                "流程为：直属经理审批 → 信息安全部安全评估 → IT 服务台安装。付费软件还须经采购部采购。"
                "免费软件一般 3 个工作日内完成，付费软件一般 10 个工作日内完成。",
                "禁止安装破解软件、P2P 下载工具和未经批准的远程控制软件。",
            ],
        ),
        Section(
            heading="7. 信息安全规定",
            blocks=[
                Bullets(
                    items=[
                        "离开工位时必须锁屏（Windows 按 Win+L，macOS 按 Control+Command+Q）；"
                        "电脑无操作 5 分钟后自动锁屏。",
                        "公司电脑默认禁用 USB 存储设备；确需使用的，须经信息安全部审批，开通期限最长 30 天。",
                        "禁止将公司文件上传到个人网盘、个人邮箱或公共 AI 工具；"
                        "对外传输文件请使用星河云盘加密外链，有效期不超过 7 天。",
                        "笔记本电脑或手机丢失，须在 1 小时内报告 IT 服务台（分机 8000），以便远程锁定和擦除数据。",
                        "访客不得连接员工网络 XH-Office，应使用访客网络 XH-Guest。",
                    ]
                ),
                Table(
                    caption="数据分级与处理要求",
                    header=["级别", "示例", "存储要求", "对外传输"],
                    rows=[
                        ["公开", "产品宣传册、官网新闻", "无限制", "无限制"],
                        ["内部", "员工手册、组织架构", "仅限公司系统", "须经部门经理同意"],
                        ["机密", "客户合同、财务报表、源代码", "加密存储", "须经信息安全部审批并加密"],
                    ],
                ),
            ],
        ),
        Section(
            heading="8. 办公网络（Wi-Fi）",
            blocks=[
                Bullets(
                    items=[
                        "XH-Office：员工网络，使用域账号和密码登录（802.1X 认证），支持 Wi-Fi 6，"
                        "建议优先连接 5GHz 频段以获得更高速度。",
                        "XH-Guest：访客网络，验证码由前台发放，有效期 8 小时，仅可访问互联网。",
                        "XH-IoT：会议室投屏器、打印机等设备专用网络，员工电脑请勿连接。",
                    ]
                ),
            ],
        ),
    ],
)


# ---------------------------------------------------------------------------------------------
# Product line (PDF manual + XLSX spec sheet share these tables)
# ---------------------------------------------------------------------------------------------

PRODUCT_SPECS = Table(
    caption="星河 X 系列规格对比",
    header=[
        "型号", "定位", "Wi-Fi 标准", "频段", "最大无线速率", "网口", "天线", "推荐覆盖面积",
        "最大接入终端", "处理器", "内存", "整机功耗", "尺寸", "重量", "支持 Mesh",
    ],
    rows=[
        ["星河X1", "入门款", "Wi-Fi 6", "2.4GHz + 5GHz 双频", "1800Mbps",
         "1 个千兆 WAN + 3 个千兆 LAN", "4 根外置天线", "90平方米", "64台",
         "四核 1.3GHz", "256MB", "≤12W", "220×140×35mm", "350g", "不支持"],
        ["星河X3", "主流款", "Wi-Fi 6", "2.4GHz + 5GHz 双频", "3000Mbps",
         "1 个 2.5G WAN + 3 个千兆 LAN", "6 根外置天线", "140平方米", "128台",
         "四核 1.7GHz", "512MB", "≤18W", "260×160×40mm", "520g", "支持"],
        ["星河X3 Pro", "高性能款", "Wi-Fi 6E", "2.4GHz + 5GHz + 6GHz 三频", "5400Mbps",
         "2 个 2.5G 网口（WAN/LAN 自适应）+ 3 个千兆 LAN + 1 个 USB 3.0", "8 根外置天线",
         "180平方米", "200台", "四核 2.0GHz", "1GB", "≤24W", "280×180×45mm", "780g", "支持"],
        ["星河X5 Mesh", "全屋 Mesh 套装（两只装）", "Wi-Fi 7", "2.4GHz + 5GHz + 6GHz 三频",
         "11000Mbps", "每只 2 个 2.5G 网口 + 2 个千兆 LAN", "8 根内置天线",
         "300平方米（两只）", "256台", "四核 2.2GHz", "2GB", "≤30W（单只）",
         "120×120×220mm（单只）", "1.1kg（单只）", "支持"],
    ],
)

PRICE_LIST = Table(
    caption="价格与保修",
    header=["型号", "建议零售价", "企业采购价（10 台起）", "整机保修期", "上市时间", "销售状态"],
    rows=[
        ["星河X1", "199元", "179元", "1年", "2023年5月", "在售"],
        ["星河X3", "399元", "359元", "2年", "2024年3月", "在售"],
        ["星河X3 Pro", "699元", "629元", "3年", "2024年9月", "在售"],
        ["星河X5 Mesh", "1599元（两只装）", "1439元（两只装）", "3年", "2025年1月", "在售"],
        ["电源适配器 12V/2A", "39元", "35元", "1年", "2023年5月", "在售（配件）"],
    ],
)

SERVICE_OUTLETS = Table(
    caption="售后服务网点",
    header=["城市", "网点名称", "地址", "服务电话", "营业时间", "支持寄修"],
    rows=[
        ["杭州", "星河售后服务中心（总部）", "杭州市滨江区星河路 88 号星河大厦 B 座 1 楼",
         "400-826-9900 转 1", "每天 9:00–21:00", "是"],
        ["上海", "星河上海服务站", "上海市闵行区申虹路 666 号 2 楼 203 室",
         "400-826-9900 转 2", "周一至周六 9:00–18:00", "是"],
        ["北京", "星河北京服务站", "北京市海淀区中关村南大街 12 号 1 层",
         "400-826-9900 转 3", "周一至周六 9:00–18:00", "是"],
        ["深圳", "星河深圳服务站", "深圳市南山区科技园南区 8 栋 101",
         "400-826-9900 转 4", "周一至周六 9:00–18:00", "是"],
        ["成都", "星河成都服务站", "成都市高新区天府大道中段 500 号 1 楼",
         "400-826-9900 转 5", "周一至周五 9:00–18:00", "否"],
        ["武汉", "星河武汉服务站", "武汉市洪山区光谷大道 77 号 1 楼",
         "400-826-9900 转 6", "周一至周五 9:00–18:00", "否"],
    ],
)

WARRANTY_TABLE = Table(
    caption="保修期限",
    header=["产品", "整机保修期", "电源适配器等配件"],
    rows=[[row[0], row[3], "1年"] for row in PRICE_LIST.rows[:4]],
)

PRODUCT_MANUAL = Document(
    title="星河 X 系列智能路由器用户手册",
    subtitle=f"适用型号：星河X1 / 星河X3 / 星河X3 Pro / 星河X5 Mesh · V2.1 · 2025 年 2 月 · {COMPANY}",
    intro=[
        "感谢您选择星河 X 系列智能路由器。使用前请仔细阅读本手册，并妥善保管。",
    ],
    sections=[
        Section(
            heading="1. 产品简介",
            blocks=[
                "星河 X 系列面向家庭和小型办公室，共四款型号：入门款星河X1、主流款星河X3、"
                "高性能款星河X3 Pro 和全屋覆盖的星河X5 Mesh 套装。"
                "星河X3 Pro 在星河X3 的基础上增加了 6GHz 频段（Wi-Fi 6E）、双 2.5G 网口和 USB 3.0 接口，"
                "适合多设备、大户型和 NAS 用户。",
                "所有型号均可通过“星河智联”App 进行配置和管理。",
            ],
        ),
        Section(
            heading="2. 规格参数",
            blocks=[PRODUCT_SPECS.transposed()],
        ),
        Section(
            heading="3. 包装清单",
            blocks=[
                Bullets(
                    items=[
                        "路由器主机 ×1（星河X5 Mesh 为 ×2）",
                        "电源适配器 12V/2A ×1（星河X5 Mesh 为 ×2）",
                        "六类网线 1.5 米 ×1",
                        "快速安装指南 ×1",
                        "保修卡 ×1",
                    ]
                ),
            ],
        ),
        Section(
            heading="4. 外观与接口",
            blocks=[
                "下图以星河X3 Pro 为例说明背面接口。WAN 口为蓝色，用于连接光猫；"
                "RESET 孔用于恢复出厂设置；WPS/Mesh 键用于一键组网。",
                Figure(kind="router_back_panel", caption="图 1  星河X3 Pro 背面接口示意图"),
                "正面指示灯的含义如下表：",
                Table(
                    caption="指示灯状态说明",
                    header=["指示灯状态", "含义", "建议操作"],
                    rows=[
                        ["白色常亮", "运行正常，已连接互联网", "无需操作"],
                        ["蓝色闪烁", "等待配置（出厂状态）", "使用“星河智联”App 完成设置"],
                        ["橙色常亮", "无法连接互联网", "检查 WAN 口网线、光猫和宽带账号"],
                        ["橙色闪烁", "正在升级固件", "请勿断电，约 3 分钟后自动完成"],
                        ["红色常亮", "硬件故障", "联系售后热线 400-826-9900"],
                    ],
                ),
            ],
        ),
        Section(
            heading="5. 快速安装",
            blocks=[
                Bullets(
                    ordered=True,
                    items=[
                        "用网线连接光猫的 LAN 口和路由器的 WAN 口（蓝色）。",
                        "接通电源，约 2 分钟后指示灯变为蓝色闪烁。",
                        "手机连接机身底部标签上的默认 Wi-Fi（名称格式为 Xinghe-XXXX，无密码），"
                        "或在电脑浏览器中打开管理地址 http://192.168.10.1。",
                        "在“星河智联”App 中按向导设置上网方式（宽带拨号 PPPoE 或自动获取 IP）、"
                        "Wi-Fi 名称和密码，以及管理员密码。",
                        "设置完成后指示灯变为白色常亮，即可上网。",
                    ],
                ),
                "路由器默认开启“双频合一”，2.4GHz 和 5GHz 使用同一个 Wi-Fi 名称。"
                "如需单独连接 5GHz，请在 App 的“Wi-Fi 设置”中关闭双频合一，"
                "5GHz 网络名称会自动追加“_5G”后缀。",
            ],
        ),
        Section(
            heading="6. 故障排除",
            subsections=[
                Section(
                    heading="6.1 无法上网",
                    blocks=[
                        "指示灯橙色常亮表示路由器无法连接互联网。请依次检查：网线是否插在蓝色 WAN 口；"
                        "光猫是否正常；宽带账号和密码是否正确。重启光猫和路由器后仍无法上网的，"
                        "请联系宽带运营商。",
                    ],
                ),
                Section(
                    heading="6.2 Wi-Fi 信号弱或网速慢",
                    blocks=[
                        "将路由器放在房屋中央、离地 1–1.5 米的开阔位置，远离微波炉、鱼缸和承重墙。"
                        "5GHz 速度更快但穿墙能力较弱，距离较远的房间建议连接 2.4GHz。"
                        "面积超过 140 平方米或多层住宅，建议使用星河X5 Mesh 或增加 Mesh 节点。",
                    ],
                ),
                Section(
                    heading="6.3 忘记管理员密码：恢复出厂设置",
                    blocks=[
                        "在通电状态下，用卡针按住机身背面的 RESET 孔 10 秒，指示灯变为蓝色闪烁后松开，"
                        "路由器将在约 3 分钟内完成重启。恢复出厂设置会清除所有配置，"
                        "需要重新按照“快速安装”步骤设置。",
                    ],
                ),
                Section(
                    heading="6.4 固件升级",
                    blocks=[
                        "路由器默认开启自动升级，每天凌晨 3:00–5:00 检查并安装新固件。"
                        "也可以在“星河智联”App 的“设备 > 固件升级”中手动升级。"
                        "升级过程中指示灯橙色闪烁，请勿断电。",
                    ],
                ),
                Section(
                    heading="6.5 Mesh 组网",
                    blocks=[
                        "星河X5 Mesh 套装出厂已完成配对，通电即可自动组网。"
                        "星河X3 和星河X3 Pro 也可作为 Mesh 节点：将新路由器放在主路由器附近并通电，"
                        "先按主路由器的 WPS/Mesh 键 2 秒，再在 2 分钟内按新路由器的 WPS/Mesh 键 2 秒。"
                        "一个 Mesh 网络最多支持 6 个节点。星河X1 不支持 Mesh 组网。",
                    ],
                ),
            ],
        ),
        Section(
            heading="7. 保修与售后服务",
            blocks=[
                "自签收之日起 7 天内，商品完好且不影响二次销售的，可申请无理由退货；"
                "15 天内出现性能故障的，可选择换货或维修。各型号保修期如下：",
                WARRANTY_TABLE,
                Bullets(
                    items=[
                        "保修凭证：购买发票和产品序列号（SN）。序列号位于机身底部标签，为以“XH”开头的 16 位字符。",
                        "不在保修范围：人为损坏、进液、私自拆机、使用非原装电源适配器造成的损坏，"
                        "以及雷击等不可抗力造成的损坏。",
                        "售后热线 400-826-9900（每天 9:00–21:00），也可在“星河智联”App 的“服务”页提交寄修申请。"
                        "保修期内寄修的往返运费由星河承担，维修周期一般为 5 个工作日（不含物流时间）。",
                    ]
                ),
                "全国售后服务网点请见《星河 X 系列产品规格表》中的“售后服务网点”工作表。",
            ],
        ),
        Section(
            heading="8. 安全须知",
            blocks=[
                "请使用原装 12V/2A 电源适配器；工作环境温度为 0–40℃，请勿在潮湿或高温环境中使用；"
                "雷雨天气建议拔掉电源和网线。",
            ],
        ),
    ],
)


# ---------------------------------------------------------------------------------------------
# Smaller files: office list (CSV), IT announcement (HTML), onboarding deck (PPTX)
# ---------------------------------------------------------------------------------------------

OFFICE_LOCATIONS = Table(
    caption="办公地点与联系电话",
    header=["办公地点", "地址", "楼层", "前台电话", "IT 现场支持", "负责人"],
    rows=[
        ["杭州总部", "杭州市滨江区星河路 88 号星河大厦 A 座", "1–12 层", "分机 8888",
         "A 座 3 楼 305 室，工作日 8:30–18:30", "行政部 王芳（分机 8126）"],
        ["上海分公司", "上海市闵行区申虹路 666 号 5 楼", "5 层", "分机 8200",
         "每周二、周四 9:00–18:00 驻场", "行政专员 陈静（分机 8201）"],
        ["深圳分公司", "深圳市南山区科技园南区 8 栋 10 楼", "10 层", "分机 8300",
         "每周三 9:00–18:00 驻场", "行政专员 刘洋（分机 8301）"],
        ["成都分公司", "成都市高新区天府大道中段 500 号 16 楼", "16 层", "分机 8400",
         "远程支持，拨打分机 8000", "行政专员 赵磊（分机 8401）"],
    ],
)

IT_ANNOUNCEMENT = Document(
    title="关于 XH-Connect VPN客户端升级至 5.2 版本的通知",
    subtitle="信息技术部 · 2025 年 3 月 10 日",
    intro=[
        "为修复安全漏洞并提升连接稳定性，XH-Connect VPN客户端将统一升级至 5.2 版本。"
        "旧版本（4.x 及以下）将于 2025 年 3 月 31 日 24:00 停止服务，届时将无法连接公司 VPN。",
    ],
    sections=[
        Section(
            heading="升级方式",
            blocks=[
                Bullets(
                    ordered=True,
                    items=[
                        "公司电脑：系统将在 3 月 17 日至 3 月 21 日之间自动推送升级，无需手动操作，升级后须重启电脑。",
                        "个人设备：访问 https://vpn.xinghe.example.com 下载 5.2 版本，覆盖安装即可，原有配置会保留。",
                        "手机：在应用商店搜索“XH-Connect”并更新。",
                    ],
                ),
            ],
        ),
        Section(
            heading="新版本改进",
            blocks=[
                Bullets(
                    items=[
                        "修复“证书无效”导致无法连接的问题；",
                        "支持在 Wi-Fi 和 5G 移动网络之间切换时自动重连；",
                        "登录时可使用“星河令牌”App 一键确认，无需手动输入 6 位动态码。",
                    ]
                ),
            ],
        ),
        Section(
            heading="联系我们",
            blocks=[
                "升级过程中遇到问题，请拨打 IT 服务台分机 8000，或在 IT 服务台门户提交 P3 工单。",
            ],
        ),
    ],
)

ONBOARDING_DECK = [
    Slide(title="星河启航：新员工入职培训", bullets=[f"{COMPANY} · 人力资源部", "2025 年版"]),
    Slide(
        title="公司概况",
        bullets=[
            "成立于 2015 年，总部位于杭州市滨江区星河路 88 号",
            "员工约 1,200 人，在上海、深圳、成都设有分公司",
            "主营星河 X 系列智能路由器：星河X1、星河X3、星河X3 Pro、星河X5 Mesh",
        ],
    ),
    Slide(
        title="入职第一天",
        bullets=[
            "9:00 到 A 座 1 楼大堂前台报到",
            "办理入职手续、签订劳动合同（试用期 3 个月）",
            "到 A 座 3 楼 305 室 IT 服务台领取工牌和笔记本电脑",
            "初始密码通过短信发送，首次登录须修改",
        ],
    ),
    Slide(
        title="IT 与信息安全要点",
        bullets=[
            "密码至少 12 位，每 90 天修改一次",
            "远程办公使用 XH-Connect VPN客户端和“星河令牌”动态码",
            "离开工位按 Win+L 锁屏，公司电脑禁用 U 盘",
            "IT 服务台：分机 8000，工作日 8:30–18:30",
        ],
    ),
    Slide(
        title="假期与福利速览",
        bullets=[
            "带薪年假：累计工作满 1 年不满 10 年为 7 天（含公司福利年假 2 天）",
            "午餐补贴 25 元/工作日，交通补贴 300 元/月",
            "每年 1 次年度体检，价值 1,000 元",
            "差旅报销须在费用发生后 30 天内提交",
        ],
    ),
    Slide(
        title="常用系统",
        bullets=[
            "星河OA：审批、考勤、报销",
            "星河商旅：机票、火车票和酒店预订",
            "星河云盘：文件共享和加密外链",
            "IT 服务台门户：报修、软件申请、权限开通",
        ],
    ),
    Slide(
        title="有问题找谁？",
        bullets=[
            "人事与福利：HR 服务热线分机 8100",
            "电脑、账号、网络：IT 服务台分机 8000",
            "报销进度：财务部，杭州总部 A 座 7 楼",
        ],
    ),
]


# ---------------------------------------------------------------------------------------------
# Pixel-only documents (OCR targets)
# ---------------------------------------------------------------------------------------------

SCANNED_NOTICE = Notice(
    title="关于开展 2024 年度办公室安全检查的通知",
    reference="行政部〔2024〕第 37 号",
    lines=[
        "各部门：",
        "为消除办公区域安全隐患，行政部将于 2024 年 11 月 18 日至 11 月 22 日"
        "对杭州总部 A 座 3 至 12 层开展年度安全检查。检查内容如下：",
        "一、灭火器是否在有效期内，压力指针是否处于绿色区域；",
        "二、安全出口和消防通道是否畅通，严禁堆放杂物；",
        "三、电源插座是否超负荷，严禁使用电暖器、电热水壶等大功率电器；",
        "四、下班后电脑、显示器、空调等电器是否关闭。",
        "检查发现的问题，请责任部门在 3 个工作日内完成整改。整改不到位的，将在全公司通报。",
        "联系人：行政部 王芳，分机 8126。",
    ],
    signoff=[f"{COMPANY}行政部", "2024 年 11 月 11 日"],
)

GUEST_WIFI_NOTICE = Notice(
    title="访客 Wi-Fi 使用须知",
    lines=[
        "网络名称：XH-Guest",
        "验证码：请向前台索取，有效期 8 小时",
        "仅可访问互联网，无法访问公司内部系统",
        "员工请连接 XH-Office，勿使用访客网络",
    ],
)


# ---------------------------------------------------------------------------------------------
# What gets built, with the title and source tag each file should be ingested under
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class DemoFile:
    name: str
    title: str
    source_tag: str


SOURCE_HANDBOOK = "员工手册"
SOURCE_IT = "IT服务台指南"
SOURCE_PRODUCT = "产品手册"
SOURCE_ADMIN = "行政通知"

MANIFEST = [
    DemoFile("employee_handbook.md", EMPLOYEE_HANDBOOK.title, SOURCE_HANDBOOK),
    DemoFile("it_helpdesk_guide.docx", IT_GUIDE.title, SOURCE_IT),
    DemoFile("product_specs.xlsx", "星河 X 系列产品规格表", SOURCE_PRODUCT),
    DemoFile("product_manual.pdf", PRODUCT_MANUAL.title, SOURCE_PRODUCT),
    DemoFile("scanned_safety_notice.pdf", SCANNED_NOTICE.title, SOURCE_ADMIN),
    DemoFile("guest_wifi_notice.png", GUEST_WIFI_NOTICE.title, SOURCE_IT),
    DemoFile("office_locations.csv", OFFICE_LOCATIONS.caption, SOURCE_ADMIN),
    DemoFile("it_announcement_vpn.html", IT_ANNOUNCEMENT.title, SOURCE_IT),
    DemoFile("onboarding_training.pptx", ONBOARDING_DECK[0].title, SOURCE_HANDBOOK),
]
