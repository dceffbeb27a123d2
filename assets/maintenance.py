"""Lake maintenance: the team lake's history kept short (:mod:`storage.lake_maintenance`).

One unpartitioned asset, ``lake_maintenance``, in its own pool (``maintenance``, one step at a
time: two maintenance runs would race each other's compactions for nothing). Each
materialization compacts partitions of many small files, expires old snapshots past the grace
period and removes orphan files (a killed writer's, and those compaction and expiry left
unreferenced), per table, and says what it did. ``lake_maintenance_job`` runs it and
``lake_maintenance_schedule`` (:mod:`pipelines.schedules`) runs that hourly, on by default in the
team and cluster profiles. On the local profile the job exists but has almost nothing to do: a
replaced batch's folder goes with its rename, so it only recovers dead writers' staging folders,
and its metadata says so.
"""

import dagster as dg

from assets.config_bridge import dagster_config
from assets.k8s import k8s_op_tags
from assets.pools import POOL_MAINTENANCE
from assets.resources import LakeResource
from storage.lake_maintenance import MaintenanceSettings, maintain
from storage.markdown import markdown_table

MaintenanceConfig = dagster_config(MaintenanceSettings, name="MaintenanceConfig")

COLUMNS = ["table", "snapshots_before", "snapshots_after", "snapshots_expired", "data_files_before",
           "data_files_after", "partitions_compacted", "compactions_lost", "manifests_before", "manifests_after",
           "orphans_removed", "seconds"]


@dg.asset(
    group_name="maintenance",
    kinds={"iceberg"},
    pool=POOL_MAINTENANCE,
    op_tags=k8s_op_tags(POOL_MAINTENANCE),  # a small CPU-only pod on the cluster profile (assets.k8s)
    description="The lake's history kept short: small files compacted, old snapshots expired, orphan files "
                "(killed writers') removed, per table of the team lake; on the local lake, dead writers' "
                "staging folders recovered only.",
)
def lake_maintenance(context: dg.AssetExecutionContext, config: MaintenanceConfig,
                     lake: LakeResource) -> dg.MaterializeResult:
    from storage.iceberg_lake import IcebergLake

    store = lake.lake(write=True)
    settings = config.to_library()
    reports = maintain(store, settings)
    team = isinstance(store, IcebergLake)
    rows = [{**{k: getattr(r, k) for k in COLUMNS if k != "seconds"}, "seconds": round(r.seconds, 3)} for r in reports]
    totals = {key: sum(getattr(r, key) for r in reports)
              for key in ("snapshots_before", "snapshots_after", "snapshots_expired", "data_files_before",
                          "data_files_after", "partitions_compacted", "compactions_lost", "orphans_removed")}
    seconds = sum(r.seconds for r in reports)
    if team:
        context.log.info(f"maintained {len(reports)} tables in {seconds:.1f} s: {totals}")
        scope = "team lake (Iceberg): compaction, snapshot expiry and orphan removal ran on every table"
    else:
        scope = ("local lake: nothing to expire or compact (a replaced batch's folder goes with its rename); "
                 f"recovered {totals['orphans_removed']} dead writers' staging folders")
        context.log.info(scope)
    return dg.MaterializeResult(metadata={
        "lake": "team" if team else "local",
        "scope": scope,
        "tables": len(reports) if team else 0,
        **{key: dg.MetadataValue.int(value) for key, value in totals.items()},
        "files_removed": dg.MetadataValue.int(totals["orphans_removed"]),
        "seconds": dg.MetadataValue.float(round(seconds, 3)),
        "settings": dg.MetadataValue.json(settings.model_dump()),
        "per_table": dg.MetadataValue.md(markdown_table(rows, COLUMNS) if rows else "no tables"),
    })
