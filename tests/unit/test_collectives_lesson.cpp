// The collectives lesson: every collective is correct for every size and rank count, and on the
// modeled clock its measured time (from the trace) equals the alpha-beta formula of its algorithm.
#include <catch2/catch.hpp>

#include <sstream>

#include "core/runtime/profile.h"
#include "lessons/cli.h"
#include "lessons/collectives.h"

namespace test_collectives_lesson {

using namespace mgpu;
using namespace mgpu::lessons;

TEST_CASE("modeled collective times equal the alpha-beta formula", "[lesson][collectives]") {
  for (const char* profile : {"8xH100-NVLink", "2x8xH100-IB", "4xA100-PCIe"}) {
    for (int ranks : {1, 2, 3, 4, 8, 16}) {
      CommonOptions c;
      c.ranks = ranks;
      c.profile = profile;
      CollectivesOptions o;
      o.min_bytes = 4;
      o.max_bytes = 1 << 20;
      std::ostringstream out;
      CollectivesResult r = run_collectives(c, o, out);
      REQUIRE(r.rows.size() == 5 * 10);
      for (auto& row : r.rows) {
        INFO(profile << ", " << ranks << " ranks, " << row.kind << " of " << row.bytes << " bytes");
        CHECK(row.correct);
        // Ring chunks of uneven size (n % N != 0) are paced by the largest chunk, which is what
        // the formula uses, so equality is exact whenever every rank has a non-empty chunk.
        // Across nodes the barrier before each collective releases ranks at different times (its
        // messages cross links of different latency), and a tree's early ranks start forwarding
        // before the last member arrives: there the formula is an upper bound.
        bool one_node = ranks <= HardwareProfile::load(profile).ranks_per_node;
        bool exact = row.kind == "broadcast" ? one_node : row.bytes / 4 >= ranks;
        if (exact)
          CHECK(row.seconds == Approx(row.theory).epsilon(1e-12).margin(1e-15));
        else
          CHECK(row.seconds <= row.theory * (1 + 1e-12));
        // The measured bytes on the wire (trace sent_bytes) equal the formula whenever the
        // buffer splits evenly over the ranks (sizes are powers of 4 bytes: N = 1, 2, 4, 8, 16).
        if ((row.bytes / 4) % ranks == 0) CHECK(row.sent_bytes == row.formula_bytes);
        CHECK(row.sent_bytes >= row.formula_bytes);
      }
    }
  }
}

TEST_CASE("bus bandwidth approaches the link's achieved bandwidth for large all-reduces",
          "[lesson][collectives]") {
  CommonOptions c;
  c.ranks = 8;
  c.device = "phantom";  // shapes only: 1 GiB buffers in no time
  CollectivesOptions o;
  o.ops = {"all_reduce"};
  o.min_bytes = 1 << 30;
  o.max_bytes = 1 << 30;
  std::ostringstream out;
  auto r = run_collectives(c, o, out);
  // The achieved (bus) bandwidth of the link: its datasheet figure x the profile's efficiency.
  double link = HardwareProfile::load("8xH100-NVLink").intra_node.achieved_bandwidth();
  CHECK(r.rows.at(0).busbw > 0.99 * link);
  CHECK(r.rows.at(0).busbw < link);
}

TEST_CASE("collectives lesson prints the nccl-tests table; bad options exit 2",
          "[lesson][collectives]") {
  std::ostringstream out, err;
  int code = mgpu_main({"run", "collectives", "--ranks", "3", "--max-bytes", "16KiB"}, out, err);
  CHECK(code == 0);
  CHECK_THAT(out.str(), Catch::Contains("busbw GB/s") && Catch::Contains("alpha-beta") &&
                            Catch::Contains("reduce_scatter") && Catch::Contains("all_to_all") &&
                            !Catch::Contains(" NO"));
  std::ostringstream out2, err2;
  CHECK(mgpu_main({"run", "collectives", "--ops", "all_to_one"}, out2, err2) == 2);
  CHECK_THAT(err2.str(),
             Catch::Contains("unknown collective 'all_to_one'") && Catch::Contains("all_to_all"));
  std::ostringstream out3, err3;
  CHECK(mgpu_main({"run", "collectives", "--min-bytes", "1MiB", "--max-bytes", "1KiB"}, out3,
                  err3) == 2);
}

TEST_CASE("the collectives footer names each link's efficiency and the link that sets the pace",
          "[lesson][collectives]") {
  // Its worked row must be the alpha-beta column's figure, from the achieved (not the datasheet)
  // bandwidth: 2(16-1) x (5 us + 256 KiB / (50 GB/s x 0.9)) over the InfiniBand between nodes.
  std::ostringstream out, err;
  REQUIRE(mgpu_main({"run", "collectives", "--ranks", "16", "--profile", "2x8xH100-IB", "--ops",
                     "all_reduce"},
                    out, err) == 0);
  const std::string text = out.str();
  CHECK(text.find("between nodes, InfiniBand NDR 400G: alpha 5.000 us, beta 50 GB/s x 0.9 = 45.0 "
                  "GB/s") != std::string::npos);
  CHECK(text.find("sets its pace: InfiniBand NDR 400G.") != std::string::npos);
  CHECK(text.find("2(16-1) x (5.000 us + 256 KiB / 45.0 GB/s) = 324.763 us") != std::string::npos);
  CHECK(text.find("   324.763 us") != std::string::npos);  // the same figure in the table
}

}  // namespace test_collectives_lesson
