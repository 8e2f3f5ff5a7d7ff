"""The item-confirmation set of the demo catalog (`demo.items`): questions as employees and
customers ask them, each with what confirmation should conclude.

- `items`: the question is about exactly these items (rule A, or B for several);
- `clarify`: it fits several items and none more than the others: ask back with exactly these;
- `none`: it names no item of the catalog (or one the catalog does not have).

`history` holds the questions asked before it in the conversation, as they were rewritten for
retrieval. Thresholds in the rules file are chosen on this set (`manage.py calibrate_items`).
"""

from __future__ import annotations

ROUTERS = ["星河X1", "星河X3", "星河X3 Pro", "星河X5 Mesh"]

CASES: list[dict] = [
    # One item, by its name as the documents write it.
    {"question": "星河X3 Pro 的保修期是多久？", "items": ["星河X3 Pro"]},
    {"question": "星河X3 的保修期是多久？", "items": ["星河X3"]},
    {"question": "星河X1 支持 Mesh 组网吗？", "items": ["星河X1"]},
    {"question": "星河X5 Mesh 推荐覆盖多大面积？", "items": ["星河X5 Mesh"]},
    {"question": "星河X3 Pro 有几根天线？", "items": ["星河X3 Pro"]},
    {"question": "星河X3多少钱？", "items": ["星河X3"]},
    # Aliases, codes and shortened names.
    {"question": "X3 Pro 的建议零售价是多少？", "items": ["星河X3 Pro"]},
    {"question": "X3Pro 多重？", "items": ["星河X3 Pro"]},
    {"question": "XH-X3P 的最大接入终端是多少台？", "items": ["星河X3 Pro"]},
    {"question": "X3 的保修期几年？", "items": ["星河X3"]},
    {"question": "X5 是几只装？", "items": ["星河X5 Mesh"]},
    {"question": "星河X5 的保修期是多久？", "items": ["星河X5 Mesh"]},
    {"question": "XH-X1 支持 Wi-Fi 6 吗？", "items": ["星河X1"]},
    {"question": "XH-Connect 怎么配置服务器地址？", "items": ["XH-Connect"]},
    {"question": "XH Connect 客户端最新版本是多少？", "items": ["XH-Connect"]},
    # Written differently: traditional characters, full-width letters, case, spacing, line breaks.
    {"question": "星河X1 支援 Mesh 組網嗎？", "items": ["星河X1"]},
    {"question": "星河Ｘ３ Ｐｒｏ 多少錢？", "items": ["星河X3 Pro"]},
    {"question": "星河x3pro 的重量是多少？", "items": ["星河X3 Pro"]},
    {"question": "星河 X3 的價格是多少？", "items": ["星河X3"]},
    {"question": "How long is the X3 Pro warranty?", "items": ["星河X3 Pro"]},
    {"question": "Does the X1 support Mesh?", "items": ["星河X1"]},
    # Near misses of a name (typos that keep the model number).
    {"question": "XH-Conect 怎么安装？", "items": ["XH-Connect"]},
    {"question": "星河X5 Mesg 的保修期是多久？", "items": ["星河X5 Mesh"]},
    {"question": "XH-Connet 登录失败怎么办？", "items": ["XH-Connect"]},
    {"question": "XHConnect 怎么升级？", "items": ["XH-Connect"]},
    # Several items named: all of them (rule B).
    {"question": "星河X3 和 X3 Pro 的保修期分别是多久？", "items": ["星河X3", "星河X3 Pro"]},
    {"question": "星河X1 和星河X5 Mesh 哪个覆盖面积大？", "items": ["星河X1", "星河X5 Mesh"]},
    {"question": "X3 Pro 比 X3 贵多少？", "items": ["星河X3", "星河X3 Pro"]},
    # The family alone: ask back with the whole family.
    {"question": "星河路由器多少钱？", "clarify": ROUTERS},
    {"question": "星河路由器的保修期是多久？", "clarify": ROUTERS},
    {"question": "星河 X 系列有几根天线？", "clarify": ROUTERS},
    {"question": "星河智能路由器的最大无线速率是多少？", "clarify": ROUTERS},
    {"question": "星河的路由器重量多少？", "clarify": ROUTERS},
    {"question": "X 系列路由器支持 Wi-Fi 几？", "clarify": ROUTERS},
    # Follow-ups: the item carries over, or the follow-up names its own.
    {"question": "那保修期呢？", "history": ["星河X3 Pro 的建议零售价是多少？"], "items": ["星河X3 Pro"]},
    {"question": "它有多重？", "history": ["星河X1 支持 Mesh 组网吗？"], "items": ["星河X1"]},
    {"question": "那 X3 Pro 呢？", "history": ["星河X3 的保修期是多久？"], "items": ["星河X3 Pro"]},
    {"question": "那 X5 Mesh 呢？", "history": ["星河X1 推荐覆盖多大面积？"], "items": ["星河X5 Mesh"]},
    # No item of the catalog: unfiltered, as without a catalog.
    {"question": "年假有几天？", "none": True},
    {"question": "路由器怎么恢复出厂设置？", "none": True},
    {"question": "WAN 口是什么颜色？", "none": True},
    {"question": "VPN 空闲多久会断开？", "none": True},
    {"question": "出差住宿标准是多少？", "none": True},
    {"question": "星河X9 的价格是多少？", "none": True},
    {"question": "星河X7 的保修期是多久？", "none": True},
    {"question": "星河OA 怎么提交报销单？", "none": True},
    {"question": "星河商旅怎么订酒店？", "none": True},
    {"question": "How many days of marriage leave do employees get?", "none": True},
    {"question": "公司在哪个城市？", "none": True},
    # Names that look like a catalog name and are not one (networks, print queues, systems).
    {"question": "XH-Office 网络怎么连接？", "none": True},
    {"question": "XH-Guest 的验证码有效期多久？", "none": True},
    {"question": "XH-SecurePrint 怎么打印？", "none": True},
    {"question": "XH-IoT 网络可以连电脑吗？", "none": True},
    {"question": "星河令牌 App 的动态码多久刷新一次？", "none": True},
]
