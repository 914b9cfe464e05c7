<?php

declare(strict_types=1);

namespace TransferSidecar\Exception;

/**
 * A direct php-curl transfer (DirectCurl) failed. getResult() has the measurement with
 * outcome "failed", as it was reported.
 */
final class TransferException extends \RuntimeException implements SidecarException
{
    /** @var array<string, mixed> */
    private array $result;

    /** @param array<string, mixed> $result */
    public function __construct(string $message, array $result = [], ?\Throwable $previous = null)
    {
        parent::__construct($message, 0, $previous);
        $this->result = $result;
    }

    /** @return array<string, mixed> */
    public function getResult(): array
    {
        return $this->result;
    }

    /** @param array<string, mixed> $result */
    public function withResult(array $result): self
    {
        return new self($this->getMessage(), $result, $this->getPrevious());
    }
}
