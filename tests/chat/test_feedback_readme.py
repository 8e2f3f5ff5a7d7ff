"""The README's feedback snippet, run as written (bash and curl) against daphne."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from rest_framework.authtoken.models import Token

from chat.models import AnswerFeedback
from tests.chat.conftest import RAG_QUESTION, live_chat_server
from tests.conftest import api_client_for

pytestmark = pytest.mark.django_db(transaction=True)

README = Path(__file__).resolve().parents[2] / "README.md"


def feedback_snippet() -> str:
    section = README.read_text(encoding="utf-8").split("### Answer feedback", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```bash\n(.*?)```", section, re.S).group(1)


def test_the_readme_feedback_snippet_rates_reads_and_withdraws(internal_chat_kb, member_user):
    # given: an answer of the member's, and their token
    answer = api_client_for(member_user).post(
        "/api/chat", {"knowledge_base_id": internal_chat_kb.slug, "question": RAG_QUESTION}, format="json").json()
    token = Token.objects.create(user=member_user).key

    with live_chat_server() as base_url:
        # when: the snippet runs as written
        env = {"RAGSITE": base_url, "TOKEN": token, "MESSAGE_ID": str(answer["message_id"]), "PATH": "/usr/bin:/bin"}
        out = subprocess.run(["bash", "-ec", feedback_snippet()], env=env, capture_output=True, text=True, timeout=120,
                             check=True).stdout

    # then: it rated the answer, read the verdict back, and withdrew it
    decoder, outputs, at = json.JSONDecoder(), [], 0
    while at < len(out.strip()):
        value, at = decoder.raw_decode(out, at)
        outputs.append(value)
    assert [(o["verdict"], o["reason"]) for o in outputs] == [("down", "没说保修从哪天算起")] * 2
    assert not AnswerFeedback.objects.exists()
