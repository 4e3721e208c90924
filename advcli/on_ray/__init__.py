"""``--engine ray``: the local engine's passes, spread over a Ray cluster one work unit a task.

A work unit is an input Parquet file, or a range of a large file's rows that starts where a row
group does, rounded down to a whole batch of the local engine
(:func:`~advcli.on_ray.cluster.work_units`), so one huge file still spreads and every unit reads
the batches a local pass reads.

A log the workers cannot read in place (JSONL, a framework's dump, struct fields lifted by
``--col``) is first read by the driver into Ray's object store in the batches a local pass
reads (:func:`~advcli.on_ray.cluster.staged`); its units are runs of those pieces.

The driver reads the per-row columns and plans the method exactly as the local engine does
(:func:`advcli.run.engine.plan_run`). A token pass (whitening statistics, segment chains, action
counts) is measured unit by unit on the cluster, each task running the local engine's measure
on its unit's batches; the driver adds the results up in log order, so every statistic is
bit-identical to the local engine's. The final pass writes one Parquet part per unit (the
driver never holds the rows); the driver writes the manifest last and commits the folder as
``shard`` does (see :func:`advcli.io.outputs.output_folder`), so ``--out`` is the complete
output or absent (in object storage: incomplete, without a manifest). ``score`` runs the critic
the same way, on a GPU per task where the cluster has GPUs. Ray is imported only here, and only
when asked for.

:mod:`advcli.on_ray.cluster` holds the connection, the staged logs and the work units;
:mod:`advcli.on_ray.tasks` the tasks of each pass and the folder of parts they write.
"""
