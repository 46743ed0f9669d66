// One open trace: its metadata, and lazy, cached, asynchronous reads on a
// dedicated I/O thread, so that the UI never waits for HDF5.
//
// Every HDF5 call of every document happens on one I/O thread shared by all
// documents (HDF5's thread-safe build serializes its calls anyway, and a job
// may then use two documents' readers, as the comparison does). Each file has
// one mxsim::trace::Reader (opened SWMR read) per process. Views ask for data by key; a job
// computes the value there (a series, one row, one snapshot, a derived map);
// the result comes back in the GUI thread, is cached (LRU by bytes) and
// shared by every view that asks for the same key. A newer request on the
// same "lane" supersedes an older one that has not started (scrubbing fast
// through steps reads only the step that is finally shown).
#pragma once
#include <QCache>
#include <QHash>
#include <QObject>
#include <QPointer>
#include <QString>
#include <QThread>
#include <QTimer>
#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "mxsim/quant_spec.hpp"
#include "mxsim/trace/common.hpp"
#include "mxsim/trace/reader.hpp"

namespace mxsim::inspector {

/// Block shape of one quantized operand as its recipe defines it, in the
/// operand's logical [rows, cols] coordinates (0 = the whole extent).
struct BlockShape {
  int rows = 0, cols = 0;
  QString format;  ///< element format, e.g. "E2M1"; "" unknown
  QString scale;   ///< "E8M0", "FP32 scale_inv", ...
  ScaleKind kind = ScaleKind::E8M0;  ///< how a stored scale reads (a byte: E8M0 or UE4M3); E8M0 when unknown
  /// How a stored scale byte of this operand reads: UE4M3 for NVFP4, else E8M0 (a byte where the
  /// recipe says FP32 is an older trace's MX byte).
  ScaleKind byte_kind() const { return kind == ScaleKind::UE4M3 ? ScaleKind::UE4M3 : ScaleKind::E8M0; }
  QString text() const;  ///< "32x32", "1x32", "per tensor"
};

struct LayerMeta {
  QString name;
  QString recipe;                    ///< from the trace's config ("" when it could not be read)
  bool quantized = false;            ///< the trace has /layers/<l>/quant
  bool osc = false, deosc = false;   ///< the trace has /layers/<l>/osc, /deosc
  std::array<uint64_t, 3> shape{};   ///< weight [G, N, K] (0 when unknown)
  std::array<BlockShape, 5> blocks;  ///< per operand of kOperandInfo: w, x, dy, x_wgrad, dy_wgrad
  std::vector<int64_t> snapshot_steps;  ///< trace rows of /snap/<l>/master (empty: none)
  /// Flat [G, N, K] indices of the watched elements (/layers/<l>/watch/element, trace.watch_elements):
  /// the trace holds their master, weight_q, scale and snaps at every step. Empty: none (or no row yet).
  std::vector<int64_t> watched;

  /// The first watched element within expert `g` (any expert when g < 0) as (g, n, k); false when none.
  bool first_watched(int g, int& eg, int& n, int& k) const;
};

struct TraceMeta {
  QString path;
  int format = 0;
  trace::Provenance prov;
  QString config_toml;
  QString config_note;              ///< why the config could not be interpreted ("" when it could)
  uint64_t steps = 0;               ///< complete steps k
  int num_microbatches = 0, experts = 0;
  std::vector<trace::DatasetInfo> datasets;
  std::vector<LayerMeta> layers;
  std::vector<int64_t> global_step;  ///< /train/step per row (empty when absent)

  const LayerMeta* layer(const QString& name) const;
  const trace::DatasetInfo* dataset(const std::string& name) const;
  /// Global optimizer step of trace row `row` (row + 1 when /train/step is absent).
  int64_t global(uint64_t row) const;
  /// The complete trace row holding global optimizer step `step` (the inverse of global); -1: none.
  int64_t row_of(int64_t step) const;
};

/// Values of rows of a series converted to double for plotting (exact for
/// f32, i32, u32; i64/u64 beyond 2^53 would round, no trace holds such counts).
struct SeriesData {
  std::vector<double> v;
  uint64_t rows = 0, elems = 1;
  std::vector<uint64_t> row_shape;
  size_t bytes() const { return v.size() * sizeof(double) + 64; }
};

/// Reads rows [first, first+count) of series `name` as double.
SeriesData read_series_double(const trace::Reader& r, const std::string& name, uint64_t first = 0,
                              uint64_t count = UINT64_MAX);
/// Reads snapshot `name` at `step` as double (shape = the snapshot's row shape).
SeriesData read_snapshot_double(const trace::Reader& r, const std::string& name, int64_t step);

class IoThread;
using ReaderRef = std::shared_ptr<std::unique_ptr<trace::Reader>>;

class TraceDocument : public QObject {
  Q_OBJECT
 public:
  enum class State { Opening, Ready, Failed };
  struct Result {
    std::shared_ptr<const void> value;
    size_t bytes = 0;
  };
  using Job = std::function<Result(const trace::Reader&)>;

  explicit TraceDocument(const QString& path, QObject* parent = nullptr);
  ~TraceDocument() override;

  /// Starts opening on the I/O thread; emits opened() or failed().
  void open();
  State state() const { return state_; }
  QString error() const { return error_; }
  const TraceMeta& meta() const { return meta_; }
  QString path() const { return path_; }
  QString displayName() const;
  uint64_t steps() const { return meta_.steps; }

  /// Live follow: poll the file for new complete steps every `ms` (SWMR refresh).
  void setFollow(bool on, int ms = 500);
  bool following() const { return poll_.isActive(); }
  /// One refresh now (asynchronous); stepsChanged() when k grew.
  void refreshNow();

  /// Runs `job` on the I/O thread unless `key` is cached or already in flight; then
  /// calls done(value) (or fail(message)) in the GUI thread while `receiver` lives.
  /// A later request with the same non-empty `lane` and receiver drops this one if it
  /// has not started. Results stay cached under `key`.
  void request(const QString& key, const QString& lane, Job job, QObject* receiver,
               std::function<void(std::shared_ptr<const void>)> done,
               std::function<void(const QString&)> fail = {});

  /// Typed form: compute(const Reader&) -> T (T has size_t bytes() or is small).
  template <class T, class F>
  void fetch(const QString& key, const QString& lane, F compute, QObject* receiver,
             std::function<void(const T&)> done, std::function<void(const QString&)> fail = {}) {
    request(
        key, lane,
        [c = std::move(compute)](const trace::Reader& r) -> Result {
          auto p = std::make_shared<T>(c(r));
          size_t b = sizeof(T);
          if constexpr (requires { p->bytes(); }) b = p->bytes();
          return {p, b};
        },
        receiver, [d = std::move(done)](std::shared_ptr<const void> v) { d(*static_cast<const T*>(v.get())); },
        std::move(fail));
  }

  /// The document's reader, for jobs of other documents that read this file too
  /// (dereference only inside a job: on the I/O thread).
  ReaderRef readerRef() const { return reader_; }

  /// Jobs queued or running (for headless rendering and tests).
  int pending() const { return int(inflight_.size()) + (refreshing_ ? 1 : 0) + (state_ == State::Opening ? 1 : 0); }
  /// Cached bytes.
  size_t cachedBytes() const { return size_t(cache_.totalCost()); }

  /// A read of this file's stored data that failed (a chunk whose Fletcher-32 checksum does not
  /// match, any other HDF5 read error): the dataset (trace::TraceError::dataset()) and the
  /// library's message. Every such failed job lands here, whatever view asked, so that no view
  /// can drop one silently; each distinct message once, in order. Jobs that fail for other
  /// reasons (no common series, a closed trace) are the asking view's to show.
  struct ReadFailure {
    QString dataset, message;
  };
  const std::vector<ReadFailure>& readFailures() const { return read_failures_; }

 signals:
  void opened();
  void failed(const QString& message);
  void stepsChanged(uint64_t steps);
  /// A read failed (the first time for this message): see readFailures().
  void readFailed(const QString& dataset, const QString& message);

 private:
  struct Waiter {
    QPointer<QObject> receiver;
    QString lane;
    std::function<void(std::shared_ptr<const void>)> done;
    std::function<void(const QString&)> fail;
  };
  struct Flight {
    std::vector<Waiter> waiters;
    std::shared_ptr<std::atomic<bool>> cancelled;
    Job job;
  };
  void launch(const QString& key);
  /// `lost`: the dataset whose stored data could not be read (trace::TraceError::dataset()),
  /// "" when the job failed for another reason.
  void finish(const QString& key, Result r, const QString& err, const QString& lost);
  /// Records a failed read of `dataset`'s stored data (once per message) and emits readFailed.
  void noteReadFailure(const QString& dataset, const QString& err);
  void post(std::function<void()> f);

  QString path_;
  State state_ = State::Opening;
  QString error_;
  TraceMeta meta_;
  std::shared_ptr<IoThread> io_;
  ReaderRef reader_;  // touched only on the I/O thread
  QCache<QString, Result> cache_;
  QHash<QString, Flight> inflight_;
  QTimer poll_;
  bool refreshing_ = false;
  std::vector<ReadFailure> read_failures_;
};

/// Human-readable reason a file could not be opened as a trace (maps the
/// trace library's and HDF5's messages onto what the user should know).
QString explain_open_error(const QString& path, const QString& raw);

}  // namespace mxsim::inspector
