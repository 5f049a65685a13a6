"""dsdr as a verl plugin: DSDR, its ablations, DARLING and population-std GRPO on verl 0.9.1.

verl loads :mod:`.plugin` through the ``verl.plugins`` entry point on ``import verl`` (in the driver
and in every Ray worker; ``VERL_USE_EXTERNAL_PLUGINS=none`` turns entry points off). Nothing here is
imported by dsdr itself: these modules import verl, which lives in its own environment
(``make setup`` builds ``.venv-verl``; see docs/training.md, "The verl plugin").

* :mod:`.settings`      -- estimator name -> dsdr algorithm; the optional ``dsdr:`` Hydra block;
* :mod:`.estimators`    -- the advantage estimators registered with ``register_adv_est``;
* :mod:`.group_rewards` -- the uid-group reward (diversity bonus / DARLING) and coupling weights;
* :mod:`.loss`          -- verl's ``ppo_loss`` minus ``lambda_l * J_local``;
* :mod:`.worker`        -- verl's actor worker with that loss;
* :mod:`.trainer`       -- trainer mode ``dsdr_sync`` (verl's sync trainer + the group reward);
* :mod:`.metrics_log`   -- verl's console / file log -> dsdr's ``metrics.jsonl``.
"""
