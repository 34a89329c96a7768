package io.xinserve.client;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import org.junit.jupiter.api.Test;

/**
 * Runs (surefire execution {@code protobuf-3.25}) with protobuf-java 3.25.8 on the class path
 * instead of the managed 4.x: {@code build()} fails naming the exact runtime version, which has no
 * {@code com.google.protobuf.RuntimeVersion} (that class came with 4.26).
 */
class OldProtobufRuntimeTest {
  @Test
  void theClassPathHasProtobuf325() {
    assertThat(ProtobufRuntimeCheck.runtimeVersion()).isEqualTo("3.25.8");
  }

  @Test
  void buildFailsNamingTheExactOldRuntime() {
    assertThatThrownBy(() -> XinserveClient.builder().target("dns:///127.0.0.1:1").plaintext().build())
        .isInstanceOf(IllegalStateException.class)
        .hasMessageContaining("the class path has protobuf-java 3.25.8.")
        .hasMessageContaining("needs com.google.protobuf:protobuf-java 4.35.1 or newer");
  }
}
