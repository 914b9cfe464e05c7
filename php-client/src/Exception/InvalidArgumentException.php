<?php

declare(strict_types=1);

namespace TransferSidecar\Exception;

/**
 * A bad option or argument given to this library (a programming error, not a runtime condition).
 */
final class InvalidArgumentException extends \InvalidArgumentException implements SidecarException
{
}
