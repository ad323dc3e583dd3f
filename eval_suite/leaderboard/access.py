"""Who may submit to the leaderboard app, and replace what.

On a Space the app signs users in with the Hub's OAuth (Gradio's LoginButton; the handler gets a
`gr.OAuthProfile`, or None when nobody is signed in). Then a record keeps its owner's Hub username, only the owner
or an admin may replace it, and each user may submit `daily_limit` times per UTC day (admins without limit). A
local run has no sign-in: anyone who can open the page may submit and replace, as the page says.

These functions only decide; they take the profile (anything with a `username`) or None and raise
SubmissionError with the reason.
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
from dataclasses import dataclass
from datetime import datetime

from eval_suite.models.loading import UsageError

from .data import SubmissionError, slugify

ADMINS_ENV = "ORCA_LEADERBOARD_ADMINS"  # comma-separated Hub usernames
DEFAULT_DAILY_LIMIT = 5


def admins_from_env() -> list[str]:
    return [u.strip() for u in os.environ.get(ADMINS_ENV, "").split(",") if u.strip()]


# what the Hub sets in a Space with `hf_oauth: true`; gradio reads them to sign users in with the Hub
OAUTH_VARS = ("OAUTH_CLIENT_ID", "OAUTH_CLIENT_SECRET", "OAUTH_SCOPES", "OPENID_PROVIDER_URL")


def in_space() -> bool:
    """As gradio tells a Space: SYSTEM=spaces and a SPACE_ID."""
    return os.environ.get("SYSTEM") == "spaces" and bool(os.environ.get("SPACE_ID"))


def is_loopback(host: str) -> bool:
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name
        return False


def login_wanted(mode: str, host: str = "127.0.0.1", warn=None) -> bool:
    """Whether the app signs users in (--login auto: in a Space; on; off), refusing where sign-in is not real.

    Outside a Space gradio mocks the Hub's OAuth: whoever clicks "Sign in" becomes the Hub account of this
    machine's token (admin rights, its daily limit, its entries). So `on` outside a Space is refused (UsageError),
    except on a loopback address, for development, with a warning (`warn(text)`). In a Space, sign-in needs the
    OAuth variables that `hf_oauth: true` sets."""
    if mode == "off" or (mode == "auto" and not in_space()):
        return False
    if in_space():
        missing = [name for name in OAUTH_VARS if not os.environ.get(name)]
        if missing:
            raise UsageError(f"--login {mode}: this Space has no Hub sign-in ({', '.join(missing)} not set): add "
                             "`hf_oauth: true` to its README.md, or use --login off")
        return True
    if not is_loopback(host):
        raise UsageError(f"--login on outside a Space, serving on {host}: gradio would mock the Hub sign-in and "
                         "every visitor who clicks \"Sign in\" would act as this machine's Hub account; run it in a "
                         "Space with `hf_oauth: true`, or try sign-in on 127.0.0.1 only")
    if warn is not None:
        warn(f"WARNING: --login on outside a Space: sign-in is MOCKED by gradio. Anyone who can open {host} and "
             "clicks \"Sign in\" acts as this machine's Hub account. For development on this machine only.")
    return True


@dataclass(frozen=True)
class Access:
    login: bool  # sign-in required (a Space with OAuth)
    admins: frozenset[str] = frozenset()  # case-folded Hub usernames
    daily_limit: int = DEFAULT_DAILY_LIMIT  # stored submissions per user per UTC day; 0: no limit

    @classmethod
    def from_settings(cls, login: bool, admins, daily_limit: int) -> Access:
        return cls(login, frozenset(a.casefold() for a in admins), daily_limit)

    def user(self, profile) -> str | None:
        """The submitter's Hub username; None in a local run."""
        if not self.login:
            return None
        username = getattr(profile, "username", None) if profile is not None else None
        if not username:
            raise SubmissionError(["sign in with your Hugging Face account (the button above) to submit"])
        return username

    def is_admin(self, user: str | None) -> bool:
        return user is not None and user.casefold() in self.admins

    def check_replace(self, old: dict | None, user: str | None, replace: bool) -> None:
        """May `user` store under a name whose newest record is `old`?"""
        if old is None:
            return
        if not replace:
            raise SubmissionError([f"a submission named {old['model_name']!r} exists (submitted "
                                   f"{old['submitted_at']}); tick \"replace\" to replace it"])
        if not self.login or self.is_admin(user):
            return
        owner = old.get("owner")
        if owner is None:
            raise SubmissionError([f"{old['model_name']!r} was stored without an owner (before sign-in was on); "
                                   "only an admin can replace it"])
        if owner.casefold() != user.casefold():
            raise SubmissionError([f"{old['model_name']!r} belongs to {owner}; only {owner} or an admin can replace it"])

    def check_daily_limit(self, user: str | None, log: dict) -> None:
        """`log`: the user's submission log of today (`log_path`), {} when there is none."""
        if user is None or self.is_admin(user) or self.daily_limit <= 0:
            return
        done = len(log.get("submissions", []))
        if done >= self.daily_limit:
            raise SubmissionError([f"{user} has submitted {done} times today (UTC); the limit is {self.daily_limit} "
                                   "a day: try again after 00:00 UTC"])

    def note(self) -> str:
        """What the page says about sign-in."""
        if not self.login:
            return ("Sign-in is off (a local run): anyone who can open this page can submit and replace any entry, "
                    "without a daily limit.")
        limit = f"{self.daily_limit} submissions per user per day (UTC)" if self.daily_limit > 0 else "no daily limit"
        return (f"Sign in with your Hugging Face account to submit. An entry can be replaced only by the account that "
                f"submitted it (or an admin); {limit}.")


def log_path(user: str, now: datetime) -> str:
    """The store file that lists `user`'s submissions of the UTC day of `now`."""
    digest = hashlib.sha256(user.casefold().encode("utf-8")).hexdigest()[:8]
    return f"submission_log/{now:%Y-%m-%d}/{slugify(user.casefold())}-{digest}.json"
