package io.hybridmq.spark;

import org.apache.spark.sql.catalyst.plans.logical.LocalRelation;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Project;
import org.apache.spark.sql.catalyst.optimizer.ConvertToLocalRelation$;
import org.apache.spark.sql.execution.SparkPlan;
import org.apache.spark.sql.execution.SparkStrategy;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2ScanRelation;

import scala.Option;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Plans {@code Project(count columns, scan answered by CountScan)}, what Spark makes of a pushed
 * {@code COUNT(*)}, as a local table holding the projected row. Spark's own planning would run the
 * projection over the scan's row in a job (a local table under a projection is a one-task job);
 * evaluated here, on the driver, a {@code count()} collects its answer without one.
 */
final class CountStrategy extends SparkStrategy {
  @Override
  @SuppressWarnings({"unchecked", "rawtypes"})
  public Seq<SparkPlan> apply(LogicalPlan plan) {
    if (!(plan instanceof Project project)
        || !(project.child() instanceof DataSourceV2ScanRelation relation)
        || !(relation.scan() instanceof CountScan scan)) {
      return none();
    }
    Seq rows = CollectionConverters.asScala(java.util.Arrays.asList(scan.rows())).toList();
    LocalRelation counted = new LocalRelation((Seq) relation.output(), rows, false, Option.empty());
    LogicalPlan folded = ConvertToLocalRelation$.MODULE$.apply(project.withNewChildren(
        (Seq) CollectionConverters.asScala(java.util.List.of((LogicalPlan) counted)).toList()));
    if (!(folded instanceof LocalRelation)) { // a projection Spark cannot evaluate here: plan it as usual
      return none();
    }
    return (Seq) CollectionConverters.asScala(java.util.List.of(planLater(folded))).toList();
  }

  @SuppressWarnings("unchecked")
  private static Seq<SparkPlan> none() {
    return (Seq<SparkPlan>) (Seq<?>) CollectionConverters.asScala(java.util.List.<SparkPlan>of()).toList();
  }
}
