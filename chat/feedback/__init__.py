"""A reader's 👍 / 👎 on an answer: given, changed and withdrawn by the reader who asked
(`services`), read back with the answer (`selectors`). Staff turn a 👎 into an evaluation case
in `evaluation.feedback`, which builds on this package."""
