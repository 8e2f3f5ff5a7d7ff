"""The demo knowledge base's item catalog: the four 星河 routers and the VPN client, with the
names people use for them. Every router belongs to one family, so a question naming only the
family ("星河路由器多少钱？") is asked back with the four as choices."""

from __future__ import annotations

ROUTERS = "星河路由器"
ROUTER_FAMILY_ALIASES = ["星河 X 系列", "星河X系列", "X 系列路由器", "星河智能路由器", "星河的路由器"]

ITEMS = [
    {"name": "星河X1", "aliases": ["星河 X1"], "codes": ["XH-X1"], "group": ROUTERS,
     "group_aliases": ROUTER_FAMILY_ALIASES, "description": "入门款 Wi-Fi 6 双频路由器"},
    {"name": "星河X3", "aliases": ["星河 X3"], "codes": ["XH-X3"], "group": ROUTERS,
     "group_aliases": ROUTER_FAMILY_ALIASES, "description": "主流款 Wi-Fi 6 双频路由器"},
    {"name": "星河X3 Pro", "aliases": ["X3Pro", "星河X3Pro"], "codes": ["XH-X3P"], "group": ROUTERS,
     "group_aliases": ROUTER_FAMILY_ALIASES, "description": "高性能款 Wi-Fi 6E 三频路由器"},
    {"name": "星河X5 Mesh", "aliases": ["星河X5", "X5"], "codes": ["XH-X5M"], "group": ROUTERS,
     "group_aliases": ROUTER_FAMILY_ALIASES, "description": "全屋 Mesh 套装（两只装）"},
    {"name": "XH-Connect", "aliases": ["XH-Connect VPN客户端", "XH Connect"], "codes": [], "group": "",
     "group_aliases": [], "description": "公司 VPN 客户端"},
]
