"""The run path: a command's options resolved into a job (:mod:`~advcli.run.jobs`), its log
opened (:mod:`~advcli.run.logs`) and what a framework's dump leaves out settled
(:mod:`~advcli.run.settling`), the passes over the log (:mod:`~advcli.run.engine`), ``audit``'s
accounting (:mod:`~advcli.run.accounting`), and advcli's advantages compared with those a
framework logged (:mod:`~advcli.run.reproduce`). Layers inside, lowest first: reproduce, logs,
engine / accounting / settling, (the Ray passes, :mod:`advcli.on_ray`), jobs."""
