package io.xinserve.client;

import static org.assertj.core.api.Assertions.assertThat;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;

/**
 * The parent POM is the one place where versions are defined; the BOM repeats the two runtime
 * versions for consumers. This keeps them equal, and generated code never newer than its runtime.
 */
class VersionAlignmentTest {
  private static String property(Path pom, String name) throws Exception {
    Matcher m = Pattern.compile("<" + Pattern.quote(name) + ">([^<]+)</").matcher(Files.readString(pom));
    assertThat(m.find()).as(name + " in " + pom).isTrue();
    return m.group(1).trim();
  }

  private static int[] version(String v) {
    String[] parts = v.split("\\.");
    int[] out = new int[3];
    for (int i = 0; i < 3 && i < parts.length; i++) {
      out[i] = Integer.parseInt(parts[i].replaceAll("\\D.*", ""));
    }
    return out;
  }

  private static int compare(String a, String b) {
    int[] x = version(a);
    int[] y = version(b);
    for (int i = 0; i < 3; i++) {
      if (x[i] != y[i]) {
        return Integer.compare(x[i], y[i]);
      }
    }
    return 0;
  }

  @Test
  void bomMatchesTheParentAndGencodeIsNotNewerThanRuntime() throws Exception {
    Path parent = Path.of("..", "pom.xml");
    Path bom = Path.of("..", "bom", "pom.xml");
    assertThat(property(bom, "protobuf.version")).isEqualTo(property(parent, "protobuf.version"));
    assertThat(property(bom, "grpc.version")).isEqualTo(property(parent, "grpc.version"));
    assertThat(compare(property(parent, "protoc.version"), property(parent, "protobuf.version")))
        .as("protoc must not be newer than protobuf-java").isLessThanOrEqualTo(0);
    assertThat(compare(property(parent, "grpc.codegen.version"), property(parent, "grpc.version")))
        .as("protoc-gen-grpc-java must not be newer than grpc-java").isLessThanOrEqualTo(0);
    // the generated code checks its runtime too: loading a message runs RuntimeVersion.validate...
    assertThat(io.xinserve.v1.GenerateRequest.getDescriptor().getFullName())
        .isEqualTo("xinserve.v1.GenerateRequest");
  }
}
