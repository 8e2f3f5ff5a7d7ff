"""Who a service acts for: a signed-in user, or nobody (a command or task, the operator).

Shared by the knowledge, document and FAQ services: the checks that need the actor and the
model validation every write runs, as coded domain errors.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.contrib.auth.models import AbstractBaseUser, Group
from django.core.exceptions import ValidationError as DjangoValidationError

from ragsite.errors import ValidationFailed

Actor = AbstractBaseUser | None


def validate_model(instance) -> None:
    """Model validation as a coded domain error (callers outside forms and serializers, such as
    management commands, would otherwise see Django's ValidationError as a crash)."""
    try:
        instance.full_clean()
    except DjangoValidationError as exc:
        messages = "; ".join(
            f"{field}: {' '.join(errors)}" if field != "__all__" else " ".join(errors)
            for field, errors in exc.message_dict.items()
        )
        raise ValidationFailed(messages, code="invalid_request", errors=exc.message_dict) from exc


def user_or_none(actor: Actor):
    return actor if actor is not None and getattr(actor, "is_authenticated", False) else None


def acts_as_superuser(actor: Actor) -> bool:
    # Commands and tasks act without a user (actor None): they are the operator. A user who is
    # not signed in (AnonymousUser) is nobody's operator: a caller that forgot its own login
    # check must fail closed here, not be waved through as the operator.
    if actor is None:
        return True
    user = user_or_none(actor)
    return user is not None and bool(user.is_superuser)


def shares_group(actor: Actor, groups: Sequence[Group]) -> bool:
    user = user_or_none(actor)
    return user is not None and user.groups.filter(pk__in=[group.pk for group in groups]).exists()
