"""Under CI, Hypothesis draws the same examples on every run (``derandomize``): a property test fails
there because the code changed, never because a new random draw found an old, documented gap.
Run locally without ``CI`` set, it keeps exploring new examples."""

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")
