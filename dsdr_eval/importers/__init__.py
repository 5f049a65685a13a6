"""Other tools' result files become run directories (``dsdr-eval import``).

One module per source format, each with ``read(path, **options) -> SourceRun`` (``source.py``);
``write.import_run`` turns a ``SourceRun`` into RUN_DIR/samples.jsonl + config.json, after which
``score``, ``diversity``, ``judge``, ``report`` and the dashboard work unchanged.
"""

from __future__ import annotations

from typing import Callable

from dsdr_eval.importers import evalscope, lighteval, lm_eval, nemo_skills, openai_batch, plain, qwen_math, verl
from dsdr_eval.importers.source import SourceRun

# --from NAME -> reader (one signature: read(path, **options) -> SourceRun; unknown options are ignored)
IMPORTERS: dict[str, Callable[..., SourceRun]] = {
    lm_eval.TOOL: lm_eval.read,
    lighteval.TOOL: lighteval.read,
    qwen_math.TOOL: qwen_math.read,
    verl.TOOL: verl.read,
    openai_batch.TOOL: openai_batch.read,
    evalscope.TOOL: evalscope.read,
    nemo_skills.TOOL: nemo_skills.read,
    plain.TOOL: plain.read,
}
