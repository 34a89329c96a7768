package io.xinserve.client;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.FileTime;
import java.time.Duration;
import java.time.Instant;
import java.util.function.Supplier;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** {@link BearerTokens#fromFile} on real files: rotation, and a file missing during a swap. */
class BearerTokensTest {
  @TempDir Path dir;

  @Test
  void aRewrittenFileGivesTheNewToken() throws Exception {
    Path f = dir.resolve("token");
    Files.writeString(f, "first\n");
    Supplier<String> s = BearerTokens.fromFile(f);
    assertThat(s.get()).isEqualTo("first");
    Files.writeString(f, "second");
    Files.setLastModifiedTime(f, FileTime.from(Instant.now().plusSeconds(5)));
    assertThat(s.get()).isEqualTo("second");
  }

  @Test
  void theLastTokenIsKeptWhileTheFileIsMissingDuringASwap() throws Exception {
    Path f = dir.resolve("token");
    Files.writeString(f, "good");
    Supplier<String> s = BearerTokens.fromFile(f);
    assertThat(s.get()).isEqualTo("good");
    Files.delete(f);
    assertThat(s.get()).isEqualTo("good");
    Files.writeString(f, "swapped");
    Files.setLastModifiedTime(f, FileTime.from(Instant.now().plusSeconds(5)));
    assertThat(s.get()).isEqualTo("swapped");
  }

  @Test
  void withoutAKeptTokenAMissingFileFailsNamingIt() throws Exception {
    Path f = dir.resolve("token");
    Files.writeString(f, "good");
    Supplier<String> s = BearerTokens.fromFile(f, Duration.ZERO);
    assertThat(s.get()).isEqualTo("good");
    Files.delete(f);
    assertThatThrownBy(s::get)
        .isInstanceOf(UncheckedIOException.class)
        .hasMessageContaining(f.toString());
    assertThatThrownBy(BearerTokens.fromFile(dir.resolve("never"))::get)
        .isInstanceOf(UncheckedIOException.class);
    assertThatThrownBy(() -> BearerTokens.fromFile(f, Duration.ofSeconds(-1)))
        .isInstanceOf(IllegalArgumentException.class);
  }
}
