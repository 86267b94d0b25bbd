#include "server/jobs/promotion_store.h"

#include <string>
#include <utility>
#include <vector>

#include "common/status_macros.h"

namespace ts::server {
namespace {

absl::StatusOr<std::vector<PromotionRecord>> ReadPromotions(SqliteStatement& select) {
  std::vector<PromotionRecord> records;
  while (true) {
    TS_ASSIGN_OR_RETURN(bool row, select.Step());
    if (!row) break;
    PromotionRecord record;
    record.model = select.ColumnText(0);
    record.version = select.ColumnText(1);
    record.checkpoint = select.ColumnText(2);
    record.source = select.ColumnText(3);
    record.validation_accuracy = select.ColumnOptionalDouble(4);
    record.time_ms = select.ColumnInt(5);
    record.job_id = select.ColumnText(6);
    record.actor = select.ColumnText(7);
    record.kind = select.ColumnText(8);
    record.forced = select.ColumnInt(9) != 0;
    records.push_back(std::move(record));
  }
  return records;
}

}  // namespace

absl::Status PromotionStore::RecordPromotion(const PromotionRecord& record) {
  if (record.model.empty()) {
    return absl::InvalidArgumentError("job store: a promotion needs a model name");
  }
  StoreDatabase::Session db(database_);
  TS_ASSIGN_OR_RETURN(SqliteStatement insert,
                      db.Prepare("INSERT INTO promotions(model, version, checkpoint, "
                                 "source, validation_accuracy, time_ms, job_id, actor, kind, "
                                 "forced) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"));
  insert.BindText(1, record.model)
      .BindText(2, record.version)
      .BindText(3, record.checkpoint)
      .BindText(4, record.source)
      .BindOptionalDouble(5, record.validation_accuracy)
      .BindInt(6, record.time_ms)
      .BindText(7, record.job_id)
      .BindText(8, record.actor)
      .BindText(9, record.kind)
      .BindInt(10, record.forced ? 1 : 0);
  return insert.Run();
}

absl::StatusOr<std::vector<PromotionRecord>> PromotionStore::CurrentPromotions() const {
  StoreDatabase::Session db(database_);
  TS_ASSIGN_OR_RETURN(
      SqliteStatement select,
      db.Prepare("SELECT model, version, checkpoint, source, validation_accuracy, time_ms, job_id, "
                 "actor, kind, forced "
                 "FROM promotions AS p WHERE seq = (SELECT max(seq) FROM promotions WHERE "
                 "model = p.model) "
                 "ORDER BY model"));
  return ReadPromotions(select);
}

absl::StatusOr<std::vector<PromotionRecord>> PromotionStore::PromotionHistory(
    const std::string& model) const {
  StoreDatabase::Session db(database_);
  TS_ASSIGN_OR_RETURN(
      SqliteStatement select,
      db.Prepare("SELECT model, version, checkpoint, source, validation_accuracy, time_ms, job_id, "
                 "actor, kind, forced "
                 "FROM promotions WHERE model = ?1 ORDER BY seq"));
  select.BindText(1, model);
  return ReadPromotions(select);
}

}  // namespace ts::server
