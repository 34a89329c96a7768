package io.xinserve.client;

import static org.assertj.core.api.Assertions.assertThat;

import org.junit.jupiter.api.Test;

/** The grpc-java version check: the versions read at run time, and when it warns. */
class GrpcRuntimeCheckTest {
  @Test
  void readsTheRuntimeAndTheBuildVersion() {
    assertThat(GrpcRuntimeCheck.builtWith()).matches("\\d+\\.\\d+\\.\\d+");
    // this build's class path has the grpc-java it was built with
    assertThat(GrpcRuntimeCheck.runtimeVersion()).isEqualTo(GrpcRuntimeCheck.builtWith());
  }

  @Test
  void anOlderGrpcJavaGetsAWarningNamingBothVersions() {
    assertThat(GrpcRuntimeCheck.warning("1.80.0", "1.85.1"))
        .hasValueSatisfying(
            m ->
                assertThat(m)
                    .contains("built and tested with grpc-java 1.85.1")
                    .contains("the class path has grpc-java 1.80.0")
                    .contains("xinserve-bom"));
    assertThat(GrpcRuntimeCheck.warning("1.85.0", "1.85.1")).isPresent();
    assertThat(GrpcRuntimeCheck.warning("0.99.9", "1.85.1")).isPresent();
  }

  @Test
  void theSameOrANewerGrpcJavaOrAnUnknownOneGetsNone() {
    assertThat(GrpcRuntimeCheck.warning("1.85.1", "1.85.1")).isEmpty();
    assertThat(GrpcRuntimeCheck.warning("1.86.0", "1.85.1")).isEmpty();
    assertThat(GrpcRuntimeCheck.warning("2.0.0", "1.85.1")).isEmpty();
    assertThat(GrpcRuntimeCheck.warning("1.85.2-SNAPSHOT", "1.85.1")).isEmpty();
    assertThat(GrpcRuntimeCheck.warning(null, "1.85.1")).isEmpty();
    assertThat(GrpcRuntimeCheck.warning("1.85", "1.85.1")).isEmpty();
  }
}
